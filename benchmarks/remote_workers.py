"""Do TFF workers run a round's clients at once? A CPU-free probe.

Each client sleeps inside TensorFlow (a tf.data sleep of --sleep_ms), so the
probe measures how the work is spread, not the machine's cores. The clients
are cut into one slice per worker (workers started here on 127.0.0.1):
with the slices running at once, 2 workers take about half the time of 1.
Also timed: TFF 0.87's own mergeable context
(`tff.backends.native.create_mergeable_comp_execution_context`), whose
workers run one after another.

  .venv/bin/python benchmarks/remote_workers.py
  .venv/bin/python benchmarks/remote_workers.py --clients=8 --sleep_ms=500
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from tff_hdp.cli import entry  # noqa: E402

_CLIENTS = flags.DEFINE_integer('clients', 8, 'Clients per call.')
_SLEEP_MS = flags.DEFINE_integer('sleep_ms', 500, 'Each client sleeps this '
                                 'long inside TensorFlow.')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Calls timed per row (the '
                                'median is shown), after one warm-up call.')
_CONCURRENCY = flags.DEFINE_integer(
    'worker_concurrency', 1, "Each worker's --max_concurrent_computation_calls"
    ': 1 runs one client at a time, as a worker whose cores one client keeps '
    'busy; -1: no limit (the sleeps then overlap inside one worker too).')
_MAX_WORKERS = flags.DEFINE_integer('max_workers', 3, 'Rows for 1, 2, ... '
                                    'up to this many workers.')


def _probe():
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import tensorflow as tf
  import tensorflow_federated as tff
  from tensorflow.python.data.experimental.ops import testing
  # pylint: enable=g-import-not-at-top

  @tff.tensorflow.computation(np.int64)
  def sleep(microseconds):
    dataset = tf.data.Dataset.range(1).apply(testing.sleep(microseconds))
    return dataset.reduce(np.int64(0), lambda total, x: total + x + 1)

  @tff.federated_computation(tff.FederatedType(np.int64, tff.CLIENTS))
  def round_of_sleeps(microseconds):
    return tff.federated_sum(tff.federated_map(sleep, microseconds))

  return round_of_sleeps


def _median_seconds(computation, arg) -> float:
  computation(arg)  # compiles; not timed
  times = []
  for _ in range(_REPEATS.value):
    start = time.perf_counter()
    result = computation(arg)
    times.append(time.perf_counter() - start)
    assert int(result) == len(arg), result
  return sorted(times)[len(times) // 2]


def _tff_context(addresses):
  """TFF 0.87's mergeable context as shipped (workers one after another)."""
  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff
  from tff_hdp.simulation import remote_execution
  # pylint: enable=g-import-not-at-top
  contexts = [tff.framework.AsyncExecutionContext(
      **remote_execution.context_arguments(a)) for a in addresses]
  return tff.backends.native.create_mergeable_comp_execution_context(contexts)


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top
  import portpicker
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
  from tff_hdp.simulation import runtime
  from tff_hdp.simulation import workers
  # pylint: enable=g-import-not-at-top
  ports = [portpicker.pick_unused_port() for _ in range(_MAX_WORKERS.value)]
  processes = [workers.start_worker(p, workers.LOOPBACK, die_with_parent=True,
                                    max_concurrent_computation_calls=(
                                        _CONCURRENCY.value),
                                    stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL) for p in ports]
  addresses = [f'{workers.LOOPBACK}:{p}' for p in ports]
  arg = [_SLEEP_MS.value * 1000] * _CLIENTS.value
  print(f'{_CLIENTS.value} clients, each sleeping {_SLEEP_MS.value} ms inside '
        f'TensorFlow; each worker runs '
        f'{_CONCURRENCY.value} call(s) at once; median of {_REPEATS.value} '
        f'calls; load average {os.getloadavg()[0]:.2f}')
  print()
  print('| context | workers | seconds per call | vs 1 worker |')
  print('|---|---|---|---|')
  try:
    one = None
    for count in range(1, _MAX_WORKERS.value + 1):
      runtime.init(addresses[:count])
      seconds = _median_seconds(_probe(), arg)
      one = one or seconds
      print(f'| tff_hdp (remote_execution) | {count} | {seconds:.3f} | '
            f'{one / seconds:.2f}x |', flush=True)
    for count in range(2, _MAX_WORKERS.value + 1):
      context_stack_impl.context_stack.set_default_context(
          _tff_context(addresses[:count]))
      seconds = _median_seconds(_probe(), arg)
      print(f'| TFF 0.87 create_mergeable_comp_execution_context | {count} | '
            f'{seconds:.3f} | {one / seconds:.2f}x |', flush=True)
  finally:
    runtime.stop_workers()
    for process in processes:
      workers.stop_process(process)


if __name__ == '__main__':
  entry.run(main, __doc__, [('remote_workers.py', [
      'clients', 'sleep_ms', 'repeats', 'worker_concurrency', 'max_workers'])])
