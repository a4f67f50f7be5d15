"""TFF learning processes: client work, cohorts, Ditto, DP-SGD, FedHDP,
noise-aware FedAvg and the cross-silo process.

Builds on `tff_hdp.aggregators` and `tff_hdp.privacy`; knows nothing of
rounds, files or the command line (`tff_hdp.simulation`).
"""
