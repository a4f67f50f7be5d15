"""Tests of the command line: `cli/`, `run_experiment.py`, `reproduce.py`."""
