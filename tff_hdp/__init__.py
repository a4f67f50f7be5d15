"""tff-hdp: federated learning where clients choose different DP guarantees."""

import importlib.util
import os
import sys

# TF reads this once, at its first import; set before anything imports it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# The pinned stack (requirements.txt), installed without pip's resolver
# (TFF 0.87's own pins cannot be met), so nothing else guarantees it is
# there: a Python without it is told how to install it, not a traceback
# into TensorFlow's absence. `find_spec` imports nothing.
_STACK = ("absl", "numpy", "tensorflow", "tensorflow_federated",
          "tensorflow_privacy", "dp_accounting")
_MISSING = [name for name in _STACK if importlib.util.find_spec(name) is None]
if _MISSING:
  raise ImportError(
      f"{', '.join(_MISSING)} {'is' if len(_MISSING) == 1 else 'are'} not "
      f"installed for {sys.executable}: run `make install` and use "
      ".venv/bin/python (README, \"Two commands\"), or install the pinned "
      "stack into this Python (README, \"Your own environment\").")
