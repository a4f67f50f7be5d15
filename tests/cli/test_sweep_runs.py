"""A sweep (reproduce.py) trains each run on a local TFF worker of its own:
one worker serving a long sweep kept memory from every run it served until
the kernel killed it (benchmarks/worker_memory.py)."""

import numpy as np
import psutil
import pytest
import tensorflow_federated as tff

from tff_hdp.cli import sweep_runs
from tests.simulation.test_local_worker import _worker_processes
from tff_hdp.simulation import runtime

pytestmark = pytest.mark.tf


@tff.tensorflow.computation(np.int32)
def _plus_one(x):
  return x + 1


def _local_workers() -> list[psutil.Process]:
  return _worker_processes(psutil.Process())


def test_a_sweep_trains_each_run_on_a_fresh_local_worker():
  runtime.init()
  served = []

  def train():
    assert _plus_one(1) == 2
    served.append(_local_workers())
    return {'run': len(served)}

  assert sweep_runs.finished_or_run('a', lambda: None, train) == {'run': 1}
  assert sweep_runs.finished_or_run('b', lambda: None, train) == {'run': 2}
  (first,), (second,) = served
  assert first.pid != second.pid
  assert not first.is_running() and not second.is_running()
  now = _local_workers()
  assert len(now) == 1 and now[0].pid not in (first.pid, second.pid)
  assert _plus_one(2) == 3  # the fresh one serves

  # A finished run is skipped: no training, the same worker.
  assert sweep_runs.finished_or_run('c', lambda: {'run': 0}, train) == {
      'run': 0}
  assert len(served) == 2 and _local_workers() == now
