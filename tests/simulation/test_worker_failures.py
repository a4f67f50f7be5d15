"""A worker that answers but never finishes its part is named within
--worker_timeout of the others finishing theirs, as a dead one is; a worker
whose computation fails, e.g. one that cannot read the clients' data at the
path it is given, is named in one line before round 1."""

import os
import shutil
import signal
import subprocess

import numpy as np
import portpicker
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.tasks import client_data, digits
from tff_hdp.federated_task import TaskOptions
from tff_hdp.simulation import remote_execution, runtime, workers

pytestmark = pytest.mark.tf

_TIMEOUT = 3.0
_BOUND_SECONDS = 180  # fails the test instead of hanging it


@pytest.fixture
def two_workers():
  ports = [portpicker.pick_unused_port() for _ in range(2)]
  processes = [workers.start_worker(p, workers.LOOPBACK, die_with_parent=True,
                                    stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL) for p in ports]
  yield [f'{workers.LOOPBACK}:{p}' for p in ports]
  for process in processes:
    workers.stop_process(process)
  runtime.init()  # the local context the rest of the suite runs in


@pytest.fixture
def bounded():
  def expire(*_):
    raise AssertionError(f'no error within {_BOUND_SECONDS} s')
  previous = signal.signal(signal.SIGALRM, expire)
  signal.alarm(_BOUND_SECONDS)
  yield
  signal.alarm(0)
  signal.signal(signal.SIGALRM, previous)


@tff.tensorflow.computation(np.int64)
def _count_to(n):
  return tf.while_loop(lambda i: i < n, lambda i: i + 1,
                       [tf.constant(0, tf.int64)])[0]


@tff.federated_computation(tff.FederatedType(np.int64, tff.CLIENTS))
def _sum_of_counts(limits):
  return tff.federated_sum(tff.federated_map(_count_to, limits))


def test_a_hung_worker_is_named(two_workers, bounded):
  del bounded
  runtime.init(two_workers, _TIMEOUT)
  assert _sum_of_counts([5, 7]) == 12  # both answer and compute
  with pytest.raises(workers.WorkerUnavailableError) as raised:
    _sum_of_counts([5, 2**62])  # the second worker's part never ends
  first, second = two_workers
  assert str(raised.value) == (
      f'TFF worker {second} hangs: it answers but has not finished its part '
      f'3 s (--worker_timeout) after TFF worker {first} finished its own; '
      'restart it and run the same command again to resume from the last '
      'checkpoint')
  assert remote_execution.answers(second, 5.0)  # hung, not dead


def test_a_worker_that_cannot_read_the_data_is_named(two_workers, tmp_path,
                                                     bounded):
  del bounded
  path = str(tmp_path / 'digits.sqlite')
  task = client_data.stored_task(
      digits.load_task(TaskOptions(num_clients=10)), path)
  runtime.init(two_workers, _TIMEOUT)
  runtime.check_workers_read(task, path)  # both read it
  task.num_train_examples(task.client_ids[0])  # this machine's copy, cached
  shutil.move(path, path + '.elsewhere')
  with pytest.raises(workers.WorkerFailedError) as raised:
    runtime.check_workers_read(task, path)
  message = str(raised.value)
  assert message.startswith(tuple(f'TFF worker {a}: ' for a in two_workers))
  assert message.endswith(f"(reading the clients' data at {path}; every "
                          'worker needs it at that same path)')
  assert "\n" not in message, message
  os.remove(path + '.elsewhere')
