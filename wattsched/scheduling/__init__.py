"""The pure scheduling core: an immutable snapshot of the cluster and ``now`` in, decisions out.

The controller builds a snapshot from its live state, the simulator from its event queue
(wattsched.snapbuild builds both); both call :func:`wattsched.scheduling.cycle.schedule` with the
plugins the configuration names. Nothing here reads the clock, the network or a database, so a
pass is deterministic for its inputs. A module per concern:

- ``records``: the snapshot and its parts, the allocation and decisions, the shells' Changes;
- ``plugins``: the interfaces of the priority, select and scheduler plugins;
- ``cycle``: one pass (priority, eligibility, the scheduler's walk);
- ``eligibility``: whether a pending job may be considered, and Slurm's reason when not;
- ``throttle``: the array throttle, the accounts' limits and the licenses during a pass;
- ``candidates``: the nodes a job may use, and the verdicts built on them;
- ``ledgers``: GPUs over time and the cluster's power under the cap during a pass.
"""
