"""Finding a job's merged HDF5 profile and drawing it (``wattsched profile plot``)."""

from __future__ import annotations

import os

from wattsched.cli.common import CLIError, load_config


def find_merged(job_id: int, user: str | None) -> str:
    """The job's merged profile in ProfileHDF5Dir, merging node files left there first."""
    from wattsched import auth
    from wattsched.profiles import h5profile

    config = load_config()
    owner = user or auth.username(os.getuid())
    path = h5profile.merge(config.profile_dir, owner, job_id)
    if path is None:
        raise CLIError(f"no profile of job {job_id} for user {owner} in {config.profile_dir} "
                       "(was it submitted with --profile=energy?)")
    return path


def plot_power(path: str, job_id: int, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from wattsched.profiles import h5profile

    if not os.path.exists(path):
        raise CLIError(f"{path}: no such file")
    figure, axes = plt.subplots(figsize=(9, 4.5), dpi=100)
    drawn = 0
    for node in h5profile.nodes(path):
        series = h5profile.series_of(path, node, "Energy")
        if len(series):
            axes.plot(series["ElapsedTime"], series["Power"], marker=".", linewidth=1.2, label=node)
            drawn += 1
    if not drawn:
        plt.close(figure)
        raise CLIError(f"{path} holds no Energy series")
    axes.set_xlabel("time since job start (s)")
    axes.set_ylabel("power (W)")
    axes.set_title(f"Job {job_id}: power per node")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small", ncol=max(1, drawn // 8))
    figure.tight_layout()
    figure.savefig(out)
    plt.close(figure)
