"""Tests of the scheduling core: the package's top level, wattsched.scheduling and the policy plugins."""
