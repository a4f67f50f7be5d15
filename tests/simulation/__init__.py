"""Tests of `tff_hdp.simulation`."""
