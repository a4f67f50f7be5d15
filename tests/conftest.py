"""Test set-up: the repository root on sys.path, one TFF context, and under
`CI` a failed run when a test was skipped for a missing data set."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)
from tests import repository  # noqa: E402
from tff_hdp.simulation import runtime  # noqa: E402

runtime.init()

_skipped_for_data = []


def pytest_runtest_logreport(report):
  if report.skipped and isinstance(report.longrepr, tuple):
    reason = report.longrepr[2]
    if repository.MISSING_DATA in reason:
      _skipped_for_data.append(f'{report.nodeid}: {reason}')


def pytest_terminal_summary(terminalreporter):
  if _skipped_for_data:
    terminalreporter.section('tests skipped for a missing data set')
    for line in _skipped_for_data:
      terminalreporter.write_line(line)
    if os.environ.get('CI'):
      terminalreporter.write_line(
          'CI is set: every data test must run, so this run fails.')


def pytest_sessionfinish(session, exitstatus):
  del exitstatus
  runtime.stop_workers()
  if _skipped_for_data and os.environ.get('CI'):
    session.exitstatus = 1
