"""Curie (etc/curie.conf, 5040 virtual nodes x 16 cores) emulated on this host.

Prints start-up time (until every node has registered), idle CPU use of the controller and
the agents over 30 s, and their RSS. Targets (issue 2): up in < 60 s, idle < 10 % of a core.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_seconds, report, rss_mib

ETC = Path(__file__).resolve().parent.parent / "etc"


def main(idle_window_s: float = 30.0) -> None:
    root = Path(tempfile.mkdtemp(prefix="wattsched-curie-"))
    conf = root / "curie.conf"
    text = (ETC / "curie.conf").read_text()
    text = text.replace("../wattsched-state/curie", str(root / "state")).replace("SlurmctldPort=6837",
                                                                                   "SlurmctldPort=6847")
    conf.write_text(text)
    env = dict(os.environ, WATTSCHED_CONF=str(conf))
    wattsched = str(Path(sys.executable).parent / "wattsched")
    try:
        started = time.perf_counter()
        subprocess.run([wattsched, "emulate", "--daemon", str(conf)], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        startup_s = time.perf_counter() - started
        info = __import__("json").loads((root / "state" / "ctld" / "emulate.json").read_text())
        pids = [info["controller"], *info["agents"]]
        time.sleep(5)
        before = {p: cpu_seconds(p) for p in pids}
        time.sleep(idle_window_s)
        used = {p: cpu_seconds(p) - before[p] for p in pids}
        ctl_pct = 100 * used[pids[0]] / idle_window_s
        agents_pct = 100 * sum(used[p] for p in pids[1:]) / idle_window_s
        ctl_rss = rss_mib(pids[0])
        agent_rss = [rss_mib(p) for p in pids[1:]]
    finally:
        subprocess.run([wattsched, "emulate", "--stop", str(conf)], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(root, ignore_errors=True)
    report("Curie emulation", f"etc/curie.conf: 5040 virtual nodes x 16 cores in {len(pids) - 1} agent processes",
           {"startup_until_all_registered_s": f"{startup_s:.1f}",
            "controller_idle_cpu_percent_of_one_core": f"{ctl_pct:.1f}",
            "agents_idle_cpu_percent_of_one_core_total": f"{agents_pct:.1f}",
            "controller_rss_mib": f"{ctl_rss:.0f}",
            "agents_rss_mib_total": f"{sum(agent_rss):.0f} ({len(agent_rss)} processes)"})


if __name__ == "__main__":
    main()
