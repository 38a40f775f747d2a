"""Slurm-compatible commands (sbatch, srun, salloc, squeue, scancel, sinfo, scontrol, sacct, ...) and
``wattsched``.

Start-up time matters here (squeue must answer in under 60 ms, sbatch run 20 times a second): the
Slurm commands read their options with :mod:`wattsched.cli.options` and import only the standard
library and what they need, when they need it. ``wattsched`` (daemons, emulation, reports) uses typer
(:mod:`wattsched.cli.plaintyper`).
"""
