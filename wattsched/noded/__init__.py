"""The node agent (slurmd's role): runs batch scripts and step tasks on one or many nodes."""
