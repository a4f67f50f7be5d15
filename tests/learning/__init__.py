"""Tests of `tff_hdp.learning`."""
