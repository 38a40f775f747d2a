"""The node agent's Prometheus metrics (``/metrics``): each of its nodes' power, energy counter and
the age of its last sensor reading, read from the energy meter's last poll (a scrape never
reads a sensor)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class AgentCollector(Collector):
    def __init__(self, meter):
        self.meter = meter

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        samples = self.meter.samples()
        watts = GaugeMetricFamily("wattsched_node_power_watts", "The node's last power reading", labels=["node"])
        joules = CounterMetricFamily("wattsched_node_energy_joules", "The node's energy counter", labels=["node"])
        age = GaugeMetricFamily("wattsched_node_energy_reading_age_seconds", "Seconds since the node's last reading",
                                labels=["node"])
        stale = GaugeMetricFamily("wattsched_node_energy_stale",
                                  "1 while the node's sensor does not answer (its last reading is kept)",
                                  labels=["node"])
        for node, sample in sorted(samples.items()):
            watts.add_metric([node], sample.watts)
            joules.add_metric([node], sample.joules)
            age.add_metric([node], max(0.0, now - sample.time))
            stale.add_metric([node], 1.0 if sample.stale else 0.0)
        yield from (watts, joules, age, stale)
