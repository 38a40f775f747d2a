"""Energy sensor plugins (AcctGatherEnergyType), polled by the node agent in its own thread."""
