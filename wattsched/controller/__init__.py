"""The controller daemon (slurmctld's role): queue, scheduling loop, node tracking, API."""
