"""End-to-end tests: the daemons on loopback, the real commands, clients and hostile accounts."""
