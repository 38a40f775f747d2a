"""Node selection plugins (SelectType): which nodes and CPUs a job gets."""
