"""The test harness: a cluster of real daemons on loopback (testing) and network namespaces for
multi-host tests (netns), used by the suite and the benchmarks, never by the daemons."""
