"""Tests of the node agent's parts against what the kernel and the emulated hardware offer."""
