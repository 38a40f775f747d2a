"""Tests of the daemons' plumbing: the authenticated socket and their start-up."""
