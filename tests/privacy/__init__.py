"""Tests of `tff_hdp.privacy`."""
