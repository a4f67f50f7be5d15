"""tff-hdp: federated learning where clients choose different DP guarantees."""

import os

# TF reads this once, at its first import; set before anything imports it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
