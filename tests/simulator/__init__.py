"""Tests of the simulator: replays, its agreement with the controller, the power budget."""
