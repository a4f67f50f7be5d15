"""Test set-up: the repository root on sys.path, one TFF context per test
process (when it runs tests marked `tf`), the fast tier's stand-in for
TensorFlow, and under
`CI` a failed run when a test was skipped for a missing data set.

Tiers: a test that imports TensorFlow, in the test process or in a process
it starts (every training run does), is marked `tf` (a module of such tests
says so once, `pytestmark = pytest.mark.tf`, where a reader sees it).
`make test-fast` runs the others with `TFF_HDP_FAST_TIER` set: modules
marked `tf` are not even imported, and TensorFlow cannot be imported at all
(a stand-in package that raises ImportError comes first on the path of the
test process and of every process it starts), so a test that needs it fails
there, saying to mark it, and the tier stays what it says.
"""

import os
import re
import shutil
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)
from tests import repository  # noqa: E402

FAST_TIER = bool(os.environ.get('TFF_HDP_FAST_TIER'))
_MODULE_MARK = re.compile(r'^pytestmark = pytest\.mark\.tf$', re.MULTILINE)

if FAST_TIER:
  _STAND_IN = repository.tensorflow_stand_in(
      tempfile.mkdtemp(prefix='tff_hdp_fast_tier_'),
      'TensorFlow is not importable in the fast tier (TFF_HDP_FAST_TIER): '
      'mark the test that needs it tf.')
  sys.path.insert(0, _STAND_IN)
  os.environ['PYTHONPATH'] = os.pathsep.join(
      [_STAND_IN] + [p for p in [os.environ.get('PYTHONPATH')] if p])

_skipped_for_data = []
_runtime_started = False


def pytest_ignore_collect(collection_path, config):
  """The fast tier does not import modules whose tests are all `tf`."""
  del config
  if (FAST_TIER and collection_path.suffix == '.py' and
      _MODULE_MARK.search(collection_path.read_text())):
    return True
  return None


def pytest_collection_finish(session):
  """Starts TFF's context (one local worker) in a test process that runs
  tests marked `tf`, before any of their fixtures."""
  global _runtime_started
  if any(item.get_closest_marker('tf') for item in session.items):
    from tff_hdp.simulation import runtime  # pylint: disable=g-import-not-at-top
    runtime.init()
    _runtime_started = True


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
  if _runtime_started:
    from tff_hdp.simulation import runtime  # pylint: disable=g-import-not-at-top
    runtime.stop_workers()
  if FAST_TIER:
    shutil.rmtree(_STAND_IN, ignore_errors=True)
  if _skipped_for_data and os.environ.get('CI'):
    session.exitstatus = 1
