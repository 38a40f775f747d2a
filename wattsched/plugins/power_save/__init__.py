"""Power-saving policies (PowerSaveType, beside Slurm's SuspendTime): which idle nodes to switch
off and which off nodes to switch on, as pure functions of a snapshot (wattsched.powersave)."""
