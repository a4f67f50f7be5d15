"""Running processes round by round: the one round loop, the three settings
that plug into it (trusted FedHDP, untrusted server, cross-silo), checkpoints,
evaluation, run files and the TFF runtime.
"""
