"""Configuration parsing: typed values, defaults, includes, and errors naming file, line and key."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from wattsched import config

ETC = Path(__file__).resolve().parents[2] / "etc"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "w.conf"
    path.write_text(text)
    return path


def test_full_file(tmp_path: Path) -> None:
    path = write(tmp_path, """
ClusterName=alpha   # comment
SlurmctldHost=ctl(10.0.0.1)
slurmctldport=7000
StateSaveLocation=state
NodeName=DEFAULT RealMemory=1000 IdleWatts=450 MaxWatts=950
NodeName=leaf[1000-1003] Sockets=2 CoresPerSocket=8 ThreadsPerCore=2 Feature=ib,gpu Weight=5
NodeName=leaf0 CPUs=32 PowerCapPriority=0 State=DRAIN
PartitionName=DEFAULT MaxTime=1-00:00:00
PartitionName=batch Nodes=leaf[1000-1003] Default=YES DefaultTime=30 MaxNodes=4
PartitionName=all Nodes=ALL State=DOWN MaxTime=INFINITE
""")
    conf = config.load(path)
    assert conf.cluster_name == "alpha" and conf.slurmctld_port == 7000
    assert (conf.slurmctld_host, conf.slurmctld_addr) == ("ctl", "10.0.0.1")
    assert conf.state_save_location == str(tmp_path / "state")
    leaf = conf.nodes[0]
    assert leaf.name == "leaf1000" and leaf.cpus == 32 and leaf.features == ("ib", "gpu")
    assert (leaf.idle_watts, leaf.max_watts, leaf.real_memory_mb, leaf.weight) == (450, 950, 1000, 5)
    assert conf.nodes[-1].state == "DRAIN" and conf.nodes[-1].power_cap_priority == 0
    batch, every = conf.partitions
    assert batch.default and batch.max_time_min == 1440 and batch.default_time_min == 30 and batch.max_nodes == 4
    assert every.nodes == tuple(n.name for n in conf.nodes) and every.state == "DOWN" and every.max_time_min is None
    assert conf.default_partition() is batch
    assert ("ClusterName", "alpha") in conf.as_pairs()


def test_cpus_of_nodename_default_stand_unless_a_line_says_otherwise(tmp_path: Path) -> None:
    """Slurm's NodeName=DEFAULT CPUs= applies to the lines that follow; without CPUs anywhere, a
    node has its sockets x cores x threads."""
    conf = config.load(write(tmp_path, "NodeName=DEFAULT CPUs=32\nNodeName=a1\nNodeName=a2 CPUs=8\n"))
    assert [n.cpus for n in conf.nodes] == [32, 8]
    conf = config.load(write(tmp_path, "NodeName=DEFAULT Sockets=2 CoresPerSocket=4\nNodeName=a1\n"))
    assert conf.nodes[0].cpus == 8


@pytest.mark.parametrize(("text", "line", "key", "message"), [
    ("ClusterName=a\nNoSuchKey=1\n", 2, "NoSuchKey", "unknown configuration key"),
    ("SlurmctldPort=abc\n", 1, "SlurmctldPort", "is not an integer"),
    ("KillWait=-3\n", 1, "KillWait", "must not be negative"),
    ("NodeName=a[1-2] CPUs=x\n", 1, "CPUs", "is not an integer"),
    ("NodeName=a[1-2 CPUs=1\n", 1, "NodeName", "invalid hostlist"),
    ("NodeName=a1 Color=red\n", 1, "Color", "unknown NodeName key"),
    ("NodeName=a1\nNodeName=a1\n", 2, "NodeName", "defined twice"),
    ("NodeName=a1\nPartitionName=p Nodes=a2\n", 2, "Nodes", "not defined by a NodeName line"),
    ("NodeName=a1\nPartitionName=p Nodes=a1 MaxTime=forever\n", 2, "MaxTime", "Invalid time limit"),
    ("NodeName=a1\nPartitionName=p Nodes=a1 Default=maybe\n", 2, "Default", "is not YES or NO"),
    ("SchedulerType=backfill\n", 1, "SchedulerType", "is not a sched/<name> plugin"),
    ("NodeName=a1\nPartitionName=p Nodes=a1\nPartitionName=p Nodes=a1\n", 3, "PartitionName", "duplicate"),
    ("ClusterName\n", 1, "ClusterName", "expected Key=Value"),
    ("NodeName=a1 Gres=gpu:2\n", 1, "Gres", "GresTypes does not name gpu"),
    ("GresTypes=gpu\nNodeName=a1 Gres=mps:100\n", 2, "Gres", "only gpu"),
    ("GresTypes=gpu\nNodeName=a1 Gres=gpu:a100:x\n", 2, "Gres", "Invalid GRES count"),
    ("GresTypes=license\n", 1, "GresTypes", "license"),
    ("NodeName=a[1-3] Port=7001-7002\n", 1, "Port", "Port count must equal that of NodeName records or there "
                                                   "must be no more than one (2 != 3)"),
    ("NodeName=a[1-2] Port=70000\n", 1, "Port", "Invalid Port 70000"),
    ("NodeName=a[1-3] NodeAddr=10.0.0.[1-2]\n", 1, "NodeAddr", "NodeAddr count must equal that of NodeName"),
    ("NodeName=DEFAULT NodeHostname=h\n", 1, "NodeHostname", "NodeHostname not allowed with NodeName=DEFAULT"),
    ("DefMemPerCPU=100\nDefMemPerNode=200\n", 2, "DefMemPerNode", "DefMemPerCPU and DefMemPerNode are mutually"),
    ("TaskPlugin=affinity,numa\n", 1, "TaskPlugin", "'numa' is not one of task/none, task/cgroup, task/affinity"),
    ("SrunPortRange=60001\n", 1, "SrunPortRange", "is not a range of ports LOW-HIGH"),
    ("JobAcctGatherType=jobacct_gather/none\n", 1, "JobAcctGatherType", "is not one of"),
    ("NodeName=a1\nPartitionName=p Nodes=a1 OverSubscribe=FORCE:4\n", 2, "OverSubscribe",
     "CPUs shared by several jobs (YES, FORCE) are not supported here"),
    ("NodeName=a1\nPartitionName=p Nodes=a1 Shared=maybe\n", 2, "Shared", "is not NO, EXCLUSIVE"),
    ("Licenses=fluent:lots\n", 1, "Licenses", "is not a license name[:count]"),
])
def test_errors_name_file_line_and_key(tmp_path: Path, text: str, line: int, key: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    assert str(caught.value).startswith(f"{path}:{line}: {key}: ")
    assert message in str(caught.value)


def test_partition_oversubscribe_no_or_exclusive(tmp_path: Path) -> None:
    """Slurm's partition OverSubscribe (and its old name Shared): EXCLUSIVE gives each job whole nodes."""
    path = write(tmp_path, "NodeName=a1\nPartitionName=p Nodes=a1 OverSubscribe=exclusive\n"
                           "PartitionName=q Nodes=a1 Shared=NO\nPartitionName=r Nodes=a1\n")
    parts = {p.name: p for p in config.load(path).partitions}
    assert [parts[n].over_subscribe for n in "pqr"] == ["EXCLUSIVE", "NO", "NO"]
    assert config.load(path).whole_node_partitions() == {"p"}


@pytest.mark.parametrize(("gres_conf", "line", "key", "message"), [
    ("Name=gpu File=/dev/nvidia[0-2]\n", 1, "File", "3 files for 2 GPUs"),
    ("Name=gpu Type=h100 File=/dev/nvidia0\n", 1, "Type", "has no Gres=gpu:h100"),
    ("NodeName=b1 Name=gpu File=/dev/nvidia0\n", 1, "NodeName", "not defined by a NodeName line"),
    ("Name=gpu Color=red\n", 1, "Color", "unknown gres.conf key"),
    ("Name=mps Count=100\n", 1, "Name", "only Name=gpu"),
    ("AutoDetect=rsmi\n", 1, "AutoDetect", "expected nvml or off"),
])
def test_gres_conf_errors_name_its_line(tmp_path: Path, gres_conf: str, line: int, key: str, message: str) -> None:
    path = write(tmp_path, "GresTypes=gpu\nNodeName=a1 Gres=gpu:2\n")
    (tmp_path / "gres.conf").write_text(gres_conf)
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    assert str(caught.value).startswith(f"{tmp_path / 'gres.conf'}:{line}: {key}: ")
    assert message in str(caught.value)


def test_gres_conf_gives_each_gpu_its_file(tmp_path: Path) -> None:
    path = write(tmp_path, "GresTypes=gpu\nNodeName=a[1-2] Gres=gpu:a100:2,gpu:v100:1\n")
    (tmp_path / "gres.conf").write_text("AutoDetect=off\nName=gpu Type=v100 File=/dev/nvidia2\n"
                                        "NodeName=a[1-2] Name=gpu Type=a100 File=/dev/nvidia[0-1]\n")
    conf = config.load(path)
    assert [(d.index, d.kind, d.file) for d in conf.nodes[1].gpus] == \
        [(0, "a100", "/dev/nvidia0"), (1, "a100", "/dev/nvidia1"), (2, "v100", "/dev/nvidia2")]
    assert conf.gres_types == ("gpu",) and conf.gres_autodetect == "off"


def test_include_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "nodes.conf").write_text("NodeName=x[1-3] CPUs=4\n")
    path = write(tmp_path, "ClusterName=i\nInclude nodes.conf\nPartitionName=p Nodes=x[1-3]\n")
    assert len(config.load(path).nodes) == 3
    with pytest.raises(config.ConfigError, match="cannot read configuration"):
        config.load(tmp_path / "absent.conf")


def test_globals_only_skips_nodes(tmp_path: Path) -> None:
    path = write(tmp_path, "ClusterName=g\nNodeName=x[1-3] CPUs=4\nPartitionName=p Nodes=x[1-3]\n")
    conf = config.load(path, globals_only=True)
    assert conf.cluster_name == "g" and conf.nodes == ()


def test_power_saving_on_real_nodes_needs_a_way_to_switch_them(tmp_path: Path) -> None:
    nodes = "NodeName=x[1-3] CPUs=4\nNodeName=x4 CPUs=4 BmcAddr=10.0.0.4\nPartitionName=p Nodes=x[1-4]\n"
    path = write(tmp_path, f"ClusterName=g\nSuspendExcNodes=x1\nSuspendTime=60\n{nodes}")
    with pytest.raises(config.ConfigError) as caught:
        config.load(path, switches_nodes=True)  # the controller: it would run the default programs
    assert (caught.value.line, caught.value.key) == (3, "SuspendTime")
    assert "SuspendProgram and ResumeProgram, or a BmcAddr" in str(caught.value)
    assert str(caught.value).endswith("none for x[2-3]")  # x1 is never switched, x4 has its BMC
    assert config.load(path).suspend_time_s == 60  # the simulator switches nothing: no programs needed
    programs = write(tmp_path, f"SuspendTime=60\nSuspendProgram=/sbin/off\nResumeProgram=/sbin/on\n{nodes}")
    assert config.load(programs, switches_nodes=True).power_saving
    virtual = write(tmp_path, f"EmulatedNodes=YES\nSuspendTime=60\n{nodes}")  # their emulated BMCs
    assert config.load(virtual, switches_nodes=True).emulated_bmcs


@pytest.mark.parametrize(("name", "nodes", "cpus"), [("emulated.conf", 16, 8), ("leaf257.conf", 257, 32),
                                                     ("curie.conf", 5040, 16)])
def test_shipped_configs(name: str, nodes: int, cpus: int) -> None:
    conf = config.load(ETC / name)
    assert len(conf.nodes) == nodes
    assert all(n.cpus == cpus for n in conf.nodes)


def test_several_controllers_primary_first(tmp_path: Path) -> None:
    conf = tmp_path / "ha.conf"
    conf.write_text("SlurmctldHost=ctl1(10.0.0.1)\nSlurmctldHost=ctl2\nSlurmctldPort=7000\nSlurmctldTimeout=30\n"
                    "NodeName=n1\nPartitionName=p Nodes=ALL\n")
    loaded = config.load(conf)
    assert loaded.slurmctld_hosts == (("ctl1", "10.0.0.1"), ("ctl2", "ctl2"))
    assert (loaded.slurmctld_host, loaded.slurmctld_addr) == ("ctl1", "10.0.0.1")
    assert loaded.controller_urls == ("http://10.0.0.1:7000", "http://ctl2:7000")
    assert loaded.slurmctld_timeout_s == 30
    shown = dict(loaded.as_pairs())
    assert (shown["SlurmctldHost[0]"], shown["SlurmctldHost[1]"]) == ("ctl1(10.0.0.1)", "ctl2(ctl2)")
    conf.write_text("SlurmctldHost=ctl1(10.0.0.1)\nSlurmctldHost=ctl1(10.0.0.2)\n")
    with pytest.raises(config.ConfigError, match=r"ha.conf:2: SlurmctldHost: a controller is listed twice"):
        config.load(conf)


def test_show_config_hides_passwords(tmp_path: Path) -> None:
    conf = tmp_path / "secret.conf"
    (tmp_path / "acct_gather.conf").write_text("EnergyIPMIPassword=hunter2\n")
    (tmp_path / "acct_gather.conf").chmod(0o600)
    conf.write_text("AccountingStorageLoc=postgresql://ws:s3cret@db/acct\n"
                    "StateStorageLoc=postgresql://ws:s3cret@db/state\nNodeName=n1\nPartitionName=p Nodes=ALL\n")
    shown = dict(config.load(conf).as_pairs())
    assert "hunter2" not in str(shown) and "s3cret" not in str(shown)
    assert shown["StateStorageLoc"] == "postgresql://ws:*****@db/state"
    assert shown["EnergyIPMIPassword"] == "*****"


def test_bmc_secrets_live_in_acct_gather_conf_readable_by_root_alone(tmp_path: Path) -> None:
    """As Slurm: the EnergyIPMI keys are acct_gather.conf's; in the file every user reads they are
    refused, and an acct_gather.conf that others may read is refused too."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("EnergyIPMIPassword=hunter2\nNodeName=n1\nPartitionName=p Nodes=ALL\n")
    with pytest.raises(config.ConfigError, match=r"slurm.conf:1: EnergyIPMIPassword: belongs in acct_gather.conf"):
        config.load(conf)
    conf.write_text("NodeName=n1\nPartitionName=p Nodes=ALL\n")
    secrets = tmp_path / "acct_gather.conf"
    secrets.write_text("EnergyIPMIUsername=ops\nEnergyIPMIPassword=hunter2\nEnergyIPMITimeout=3\n")
    secrets.chmod(0o644)
    with pytest.raises(config.ConfigError, match=r"acct_gather.conf.*readable by its owner \(root\) alone.*0644"):
        config.load(conf)
    secrets.chmod(0o600)
    loaded = config.load(conf)
    assert (loaded.energy_ipmi_username, loaded.energy_ipmi_password, loaded.energy_ipmi_timeout_s) == \
        ("ops", "hunter2", 3)
    assert config.load(conf, globals_only=True).energy_ipmi_password == ""  # the commands never read it


def test_emulated_bmcs_get_one_random_password_per_cluster(tmp_path: Path) -> None:
    from wattsched import bmcauth

    conf = tmp_path / "slurm.conf"
    conf.write_text(f"StateSaveLocation={tmp_path / 'ctld'}\nEmulatedNodes=YES\n"
                    "NodeName=n1\nPartitionName=p Nodes=ALL\n")
    user, password = bmcauth.credentials(config.load(conf))
    assert user == "admin" and len(password) >= 20 and password != "admin"
    assert bmcauth.credentials(config.load(conf)) == (user, password)  # kept
    kept = tmp_path / "ctld" / bmcauth.PASSWORD_FILE
    assert kept.stat().st_mode & 0o777 == 0o600 and (tmp_path / "ctld").stat().st_mode & 0o777 == 0o700
    other = tmp_path / "other"
    assert bmcauth.emulated_password(str(other)) != password  # another cluster, another password


def test_redfish_credentials_fall_back_to_the_ipmi_ones_and_stay_secret(tmp_path: Path) -> None:
    from wattsched import bmcauth

    conf = tmp_path / "slurm.conf"
    conf.write_text("EnergyRedfishPassword=hunter2\nNodeName=n1\nPartitionName=p Nodes=ALL\n")
    with pytest.raises(config.ConfigError, match=r"EnergyRedfishPassword: belongs in acct_gather.conf"):
        config.load(conf)
    conf.write_text("NodeName=n1\nPartitionName=p Nodes=ALL\n")
    secrets = tmp_path / "acct_gather.conf"
    secrets.write_text("EnergyIPMIUsername=ops\nEnergyIPMIPassword=hunter2\nEnergyRedfishCAFile=bmc-ca.pem\n")
    secrets.chmod(0o600)
    loaded = config.load(conf)
    assert bmcauth.credentials(loaded, "redfish") == ("ops", "hunter2")  # one BMC, one set of accounts
    assert loaded.energy_redfish_ca_file == str(tmp_path / "bmc-ca.pem")  # beside the file
    secrets.write_text("EnergyIPMIUsername=ops\nEnergyIPMIPassword=hunter2\nEnergyRedfishUsername=rf\n"
                       "EnergyRedfishPassword=s3cret\n")
    loaded = config.load(conf)
    assert bmcauth.credentials(loaded, "redfish") == ("rf", "s3cret")
    assert bmcauth.credentials(loaded, "ipmi") == ("ops", "hunter2")
    assert dict(loaded.as_pairs())["EnergyRedfishPassword"] == "*****"


@pytest.mark.parametrize(("keys", "protocols", "switching"), [
    ("AcctGatherEnergyType=acct_gather_energy/ipmi", {"ipmi"}, "ipmi"),
    ("AcctGatherEnergyType=acct_gather_energy/redfish", {"redfish"}, "redfish"),
    ("AcctGatherEnergyType=acct_gather_energy/redfish\nSuspendTime=60", {"redfish"}, "redfish"),
    ("AcctGatherEnergyType=acct_gather_energy/ipmi\nSuspendTime=60\nBmcProtocol=Redfish", {"ipmi", "redfish"},
     "redfish"),
    ("AcctGatherEnergyType=acct_gather_energy/emulated\nSuspendTime=60", {"ipmi"}, "ipmi"),
    ("AcctGatherEnergyType=acct_gather_energy/emulated\nSuspendTime=60\nSuspendProgram=/bin/true\n"
     "ResumeProgram=/bin/true", set(), "ipmi"),
    ("AcctGatherEnergyType=acct_gather_energy/emulated", set(), "ipmi"),
])
def test_the_emulated_bmcs_speak_what_the_cluster_reads_and_switches_them_with(
        tmp_path: Path, keys: str, protocols: set[str], switching: str) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"EmulatedNodes=YES\n{keys}\nNodeName=n1\nPartitionName=p Nodes=ALL\n")
    loaded = config.load(conf)
    assert (set(loaded.emulated_bmc_protocols), loaded.switching_protocol) == (protocols, switching)
    assert loaded.emulated_bmcs == bool(protocols)


@pytest.mark.parametrize("name", ["emulated.conf", "ha.conf", "leaf257.conf"])
def test_the_shipped_emulated_clusters_confine_jobs_in_control_groups(name: str) -> None:
    """Nothing a job starts outlives it there (where the host has no cgroups the agent falls back to
    process groups, saying so: wattsched.noded.agent.confinement)."""
    loaded = config.load(Path(__file__).resolve().parents[2] / "etc" / name)
    assert loaded.proctrack_type == "proctrack/cgroup" and loaded.cgroups and loaded.max_pids_per_job == 8192


def test_a_slurm_sites_daemon_keys_are_read(tmp_path: Path) -> None:
    """slurm.conf as a Slurm site writes it: accounting through slurmdbd (here the controller's own),
    the daemons' pid and log files (%n: the node's name), SlurmdDebug."""
    conf = config.load(str(write(tmp_path, "AccountingStorageType=accounting_storage/slurmdbd\n"
                                 "SlurmctldPidFile=/run/slurmctld.pid\nSlurmdPidFile=/run/slurmd-%n.pid\n"
                                 "SlurmctldLogFile=log/ctld.log\nSlurmdLogFile=/var/log/slurm/%n.log\n"
                                 "SlurmdDebug=debug\nNodeName=n1\n")))
    assert conf.accounting_storage_type == "accounting_storage/slurmdbd"
    assert (conf.slurmctld_pid_file, conf.slurmd_pid_file) == ("/run/slurmctld.pid", "/run/slurmd-%n.pid")
    assert (conf.slurmctld_log_file, conf.slurmd_log_file) == (str(tmp_path / "log/ctld.log"), "/var/log/slurm/%n.log")
    assert (conf.log_level, conf.slurmd_log_level) == ("info", "debug")


def test_max_tasks_per_node_is_read_and_bounded(tmp_path: Path) -> None:
    assert config.load(str(write(tmp_path, "NodeName=n1\n"))).max_tasks_per_node == 512  # Slurm's default
    assert config.load(str(write(tmp_path, "MaxTasksPerNode=4\nNodeName=n1\n"))).max_tasks_per_node == 4
    with pytest.raises(config.ConfigError, match="MaxTasksPerNode"):
        config.load(str(write(tmp_path, "MaxTasksPerNode=0\nNodeName=n1\n")))


def test_over_time_limit_is_the_clusters_unless_a_partition_sets_its_own(tmp_path: Path) -> None:
    """OverTimeLimit in minutes (Slurm's range, to 65,533) or UNLIMITED, for the cluster and per
    partition; scontrol show partition and its JSON show a partition's own, NONE when it has none."""
    from wattsched import dataparser
    from wattsched.cli.scontrol import partition_lines
    from wattsched.controller.views import partition_views

    conf = config.load(str(write(tmp_path, "OverTimeLimit=5\nNodeName=n1\nPartitionName=p Nodes=n1\n"
                                           "PartitionName=q Nodes=n1 OverTimeLimit=UNLIMITED\n"
                                           "PartitionName=r Nodes=n1 OverTimeLimit=0\n")))
    assert (conf.over_time_s("p"), conf.over_time_s("q"), conf.over_time_s("r")) == (300, math.inf, 0)
    assert ("OverTimeLimit", "5") in conf.as_pairs()
    views = {v["name"]: v for v in partition_views(conf, {})}
    shown = [next(line for line in partition_lines(views[n]) if line and line.startswith("OverTimeLimit="))
             for n in "pqr"]
    assert [line.split()[0] for line in shown] == ["OverTimeLimit=NONE", "OverTimeLimit=UNLIMITED", "OverTimeLimit=0"]
    limits = [dataparser.partition({**views[n], "total_cpus": 1, "total_nodes": 1}, "c")["maximums"]["over_time_limit"]
              for n in "pqr"]
    assert limits == [{"set": False, "infinite": False, "number": 0}, {"set": False, "infinite": True, "number": 0},
                      {"set": True, "infinite": False, "number": 0}]
    assert config.load(str(write(tmp_path, "NodeName=n1\n"))).over_time_s("any") == 0  # Slurm's default
    for wrong in ("65534", "-1", "soon"):
        with pytest.raises(config.ConfigError, match="OverTimeLimit"):
            config.load(str(write(tmp_path, f"OverTimeLimit={wrong}\nNodeName=n1\n")))


def test_propagate_resource_limits_names_slurms_limits(tmp_path: Path) -> None:
    conf = config.load(str(write(tmp_path, "PropagateResourceLimitsExcept=core,memlock\nNodeName=n1\n")))
    assert (conf.propagate_resource_limits, conf.propagate_resource_limits_except) == ("ALL", "CORE,MEMLOCK")
    with pytest.raises(config.ConfigError, match="Invalid resource limit name: NOPE"):
        config.load(str(write(tmp_path, "PropagateResourceLimits=CORE,NOPE\nNodeName=n1\n")))


def test_many_slurmds_of_one_host_each_have_a_port_and_files_of_their_own(tmp_path: Path) -> None:
    """Slurm's multiple slurmds: NodeAddr, NodeHostname and Port take one value per node (a range
    without brackets for ports), or one for all; SlurmdSpoolDir and TmpFS take %n."""
    conf = config.load(write(tmp_path, "SlurmdSpoolDir=/var/spool/d/%n\nTmpFS=/scratch/%n\n"
                                       "NodeName=n[1-3] NodeHostname=host1 NodeAddr=10.0.0.[1-3] Port=7001-7003\n"
                                       "NodeName=m1 Port=[7010]\n"))
    assert [(n.name, n.node_hostname, n.node_addr, n.port) for n in conf.nodes] == [
        ("n1", "host1", "10.0.0.1", 7001), ("n2", "host1", "10.0.0.2", 7002), ("n3", "host1", "10.0.0.3", 7003),
        ("m1", None, None, 7010)]
    assert (conf.slurmd_spool_dir, conf.tmp_fs) == ("/var/spool/d/%n", "/scratch/%n")
    assert ("TmpFS", "/scratch/%n") in conf.as_pairs()


def test_slurm_sites_name_plugins_whole_or_short_and_list_what_they_track(tmp_path: Path) -> None:
    conf = config.load(write(tmp_path, "TaskPlugin=affinity,task/cgroup\nSrunPortRange=60001-63000\n"
                                       "AccountingStorageTRES=gres/gpu,energy\nJobAcctGatherType=jobacct_gather/cgroup\n"
                                       "SelectTypeParameters=cr_cpu\n"))
    assert conf.task_plugin == ("task/affinity", "task/cgroup") and conf.srun_port_range == (60001, 63000)
    assert conf.accounting_storage_tres == ("gres/gpu", "energy") and not conf.memory_consumable


def test_sched_interval_sets_the_periodic_passes_and_the_timers_keep_their_second(tmp_path: Path) -> None:
    """SchedulerParameters=sched_interval=N (Slurm's key; -1: no periodic pass) over our own
    SchedulerInterval; the loop passes when kicked or every interval, and runs its timers (time
    limits, node timeouts) every second whatever the interval."""
    from wattsched.controller.loop import due

    def interval(line: str) -> float:
        return config.load(str(write(tmp_path, f"{line}\nNodeName=n1\n"))).pass_interval_s()

    assert interval("") == 1.0 and interval("SchedulerInterval=0.2") == 0.2
    assert interval("SchedulerParameters=bf_interval=1,sched_interval=60\nSchedulerInterval=0.2") == 60
    assert interval("SchedulerParameters=sched_interval=-1") == math.inf
    with pytest.raises(config.ConfigError, match="SchedulerParameters"):
        interval("SchedulerParameters=sched_interval=soon")
    assert due(101.0, False, 100.0, 100.0, 60) == (True, False)  # a second on: timers, no pass
    assert due(100.5, True, 100.0, 100.0, 60) == (False, True)  # a submission: a pass at once
    assert due(160.0, False, 159.5, 100.0, 60) == (False, True)  # the interval is over
    assert due(10_000.0, False, 9_999.0, 100.0, math.inf) == (True, False)  # -1: only when kicked
