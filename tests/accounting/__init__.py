"""Tests of the accounting database on every engine the machine has."""
