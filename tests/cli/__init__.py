"""Tests of the commands: their options, their imports and the examples the docs show."""
