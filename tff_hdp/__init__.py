"""tff-hdp: federated learning where clients choose different DP guarantees."""

import os

# TF reads this once, at its first import; set before anything imports it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# Imported here, at package import, because Keras 2.14 (loaded lazily by TF)
# cannot build functional or Sequential models when TF is first imported
# inside absl's `app.run` main; every entry point imports this package first.
import tensorflow  # noqa: E402,F401  pylint: disable=unused-import,g-import-not-at-top
