"""The TFF execution context this project runs in, and its clean shutdown.

`init()` installs it once per process. By default: TFF's C++ runtime in one
local worker process (as `tff.backends.native.set_sync_local_cpp_execution_
context` does), started by `workers.start_worker` so that it listens on
127.0.0.1 only and dies with this process, however it ends. With
`workers=['host:port', ...]`: TFF's mergeable execution across those remote
workers (`remote_execution.RemoteWorkersContext`), each computation's clients
cut into one contiguous slice per worker.

`stop_workers()` (also run at exit) stops the local worker: a leftover one
keeps pipes open (a CI log never closes) and holds memory.
`renew_local_worker()` replaces it between the runs of a sweep: TFF's worker
keeps memory from every call it served (about 1 GB per 200-round
Fashion-MNIST run, benchmarks/worker_memory.py), so one worker serving a
long sweep grows until the kernel kills it.
"""

from __future__ import annotations

import atexit
import gc
import subprocess
from typing import Sequence

from tff_hdp.simulation import workers as workers_lib

# Seconds a silent remote worker is waited for (--worker_timeout).
DEFAULT_WORKER_TIMEOUT = 60.0
# Seconds the local worker may take to answer once it listens.
_READY_SECONDS = 60.0

_initialized = None  # the (workers, timeout) the installed context serves
_registered = False
_local_worker: subprocess.Popen | None = None


def _local_context():
  """TFF's sync C++ context on a worker of our own, listening on loopback,
  that names the worker if it dies (`remote_execution.LocalWorkerContext`)."""
  global _local_worker
  # pylint: disable=g-import-not-at-top
  import portpicker
  from tff_hdp.simulation import remote_execution
  # pylint: enable=g-import-not-at-top
  port = portpicker.pick_unused_port()
  _local_worker = workers_lib.start_worker(
      port, workers_lib.LOOPBACK, die_with_parent=True)
  address = f'{workers_lib.LOOPBACK}:{port}'
  if not remote_execution.answers(address, _READY_SECONDS):
    raise workers_lib.WorkerStartError(
        f'the local TFF worker at {address} does not answer')
  return remote_execution.LocalWorkerContext(address, _local_worker)


def _set_context(context) -> None:
  # pylint: disable-next=g-import-not-at-top
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
  context_stack_impl.context_stack.set_default_context(context)


def stop_workers() -> None:
  """Stops the local TFF worker and uninstalls the context; `init()`
  installs a fresh one."""
  global _initialized, _local_worker
  if _initialized is not None:
    # pylint: disable-next=g-import-not-at-top
    from tensorflow_federated.python.core.impl.context_stack import runtime_error_context
    _set_context(runtime_error_context.RuntimeErrorContext())
    _initialized = None
    gc.collect()
  if _local_worker is not None:
    workers_lib.stop_process(_local_worker)
    _local_worker = None


def renew_local_worker() -> None:
  """Starts a fresh local worker in place of the running one (see the
  module docstring); nothing with remote workers or none installed."""
  installed = _initialized
  if installed is not None and not installed[0]:
    stop_workers()
    init(*installed)


def quiet_logging() -> None:
  """Errors only from TF's and absl's Python loggers (TFF and Keras log
  every model they build at INFO)."""
  import absl.logging  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel('ERROR')
  absl.logging.set_verbosity(absl.logging.ERROR)


def init(workers: Sequence[str] = (),
         worker_timeout: float = DEFAULT_WORKER_TIMEOUT) -> None:
  """Installs the execution context (see the module docstring) and quiets
  TF/absl logging. Calling it again with the same arguments does nothing;
  with others, it replaces the context."""
  global _initialized, _registered
  wanted = (tuple(workers), float(worker_timeout))
  if _initialized == wanted:
    return
  if _initialized is not None:
    stop_workers()
  quiet_logging()
  if workers:
    # pylint: disable-next=g-import-not-at-top
    from tff_hdp.simulation import remote_execution
    context = remote_execution.RemoteWorkersContext(workers, worker_timeout)
  else:
    context = _local_context()
  _set_context(context)
  if not _registered:
    atexit.register(stop_workers)
    _registered = True
  _initialized = wanted


def workers_share_disk() -> bool:
  """Whether the TFF workers run on this machine, so can read its files:
  the local worker (or TFF's own in-process context), not remote ones."""
  return not (_initialized and _initialized[0])


def worker_count() -> int:
  """How many workers share each computation's clients (1 when local)."""
  return len(_initialized[0]) if _initialized and _initialized[0] else 1


def with_worker_count(run_key: dict) -> dict:
  """`run_key` plus the worker count when it is above 1: sums are taken per
  slice of clients, so another count is another run (to float rounding)."""
  if worker_count() > 1:
    run_key = dict(run_key, workers=worker_count())
  return run_key


def check_workers_read(task, where: str) -> None:
  """With remote workers and a task whose clients they read themselves
  (`ClientSource.workers_read`): every worker reads the first client before
  round 1, so a worker without the data at `where` (e.g. the file's path) is
  named now, in one line, not mid-run; so is one whose copy holds another
  number of examples."""
  if workers_share_disk() or not task.clients.workers_read:
    return
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import tensorflow as tf
  import tensorflow_federated as tff
  # pylint: enable=g-import-not-at-top
  first = task.client_ids[0]
  key, expected = task.clients.stored_key(first), task.num_train_examples(first)

  @tff.tensorflow.computation(np.str_)
  def count(k):
    return tf.shape(task.clients.read_stored(k)[0])[0]

  @tff.federated_computation(tff.FederatedType(np.str_, tff.CLIENTS))
  def counts(keys):
    return tff.federated_map(count, keys)

  addresses = _initialized[0]
  try:
    found = counts([key] * len(addresses))
  except workers_lib.WorkerFailedError as e:
    raise workers_lib.WorkerFailedError(
        f'{e} (reading the clients\' data at {where}; every worker needs it '
        'at that same path)') from None
  for address, n in zip(addresses, found):
    if n != expected:
      raise workers_lib.WorkerFailedError(
          f'TFF worker {address} reads {n} training examples of client '
          f'{first!r} at {where}, this machine {expected}: its copy differs; '
          'copy the same file to every worker.')
