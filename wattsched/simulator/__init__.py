"""The trace-driven simulator: a discrete-event shell around the same pure policy core as the
controller (scheduling, backfill, power cap, power saving), with a virtual clock."""
