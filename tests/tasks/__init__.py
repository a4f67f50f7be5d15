"""Tests of the registered tasks in `tasks/`."""
