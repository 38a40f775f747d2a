"""Per-job power profiles in HDF5 (Slurm's acct_gather_profile/hdf5 layout): written by the agents,
merged by the controller, read by sh5util."""
