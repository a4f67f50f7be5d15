"""Tests of `tff_hdp.aggregators`."""
