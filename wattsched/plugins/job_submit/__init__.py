"""Submission plugins (Slurm's JobSubmitPlugins): site rules that see every submission and every
job update before anything else does, and may change them or refuse them."""
