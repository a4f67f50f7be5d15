"""Tests of `tff_hdp.estimation`."""
