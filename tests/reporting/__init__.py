"""Tests of `tff_hdp.reporting`."""
