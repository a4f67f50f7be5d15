"""Test set-up: the repository root on sys.path and one TFF context."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)
from tff_hdp.simulation import runtime  # noqa: E402

runtime.init()


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  runtime.stop_workers()
