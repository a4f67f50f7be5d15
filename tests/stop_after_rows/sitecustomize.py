"""Stops a run (SIGSTOP to itself) right after it writes a given row of a
`rounds.csv`, for `tests.repository.start_paused_after_rows`: what a test
does there (a kill, a changed file mode) lands after exactly that row,
however fast or loaded the machine is. It stops once; SIGCONT resumes it.

Python imports this module at start-up when its folder is on PYTHONPATH;
`$TFF_HDP_TEST_STOP_AFTER` is `<rows>:<path of rounds.csv>`. It wraps
`checkpointing.writing`, through which the round loop writes and flushes
each row, once that module is imported (nothing is imported early).
"""

import contextlib
import importlib.abc
import importlib.util
import os
import signal
import sys

_ROWS, _, _PATH = os.environ['TFF_HDP_TEST_STOP_AFTER'].partition(':')
_ROWS, _PATH = int(_ROWS), os.path.realpath(_PATH)
_MODULE = 'tff_hdp.simulation.checkpointing'


def _rows_written() -> int:
  with open(_PATH) as f:
    return max(sum(1 for _ in f) - 1, 0)  # less the header


def _stopping(writing):
  stopped = []

  @contextlib.contextmanager
  def stopping_writing(path):
    with writing(path):
      yield
    if (not stopped and os.path.realpath(path) == _PATH and
        os.path.exists(_PATH) and _rows_written() >= _ROWS):
      stopped.append(True)  # once: a run resumed by SIGCONT goes on
      os.kill(os.getpid(), signal.SIGSTOP)
  return stopping_writing


class _AfterImport(importlib.abc.MetaPathFinder):
  """Wraps `writing` of `_MODULE` once that module has run."""

  def find_spec(self, name, path, target=None):
    del path, target
    if name != _MODULE:
      return None
    sys.meta_path.remove(self)
    spec = importlib.util.find_spec(name)
    run_module = spec.loader.exec_module

    def exec_module(module):
      run_module(module)
      module.writing = _stopping(module.writing)

    spec.loader.exec_module = exec_module
    return spec


sys.meta_path.insert(0, _AfterImport())
