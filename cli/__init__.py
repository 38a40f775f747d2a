"""Slurm-compatible commands (sbatch, srun, squeue, scancel, sinfo, scontrol, sacct) and ``wattsched``.

Start-up time matters here (squeue must answer in under 0.25 s), so these modules import
only the standard library, typer, and what they need, when they need it.
"""

import os

# Plain click-style usage errors, like Slurm's, and no rich import on the start-up path.
os.environ.setdefault("TYPER_USE_RICH", "0")
