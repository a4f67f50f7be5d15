"""The TFF execution context this project runs in, and its clean shutdown.

TFF 0.87 executes computations in a C++ worker subprocess that inherits the
parent's stdout and is not reliably stopped when Python exits; a leftover
worker keeps pipes open (a CI log never closes) and holds memory. Every entry
point calls `init()` once; it installs TFF's local C++ context and stops the
worker when the interpreter exits.
"""

from __future__ import annotations

import atexit
import gc
import subprocess

import psutil

_initialized = False
_registered = False


def _stop_service_managers() -> None:
  """Stops workers through TFF's own handles, then forgets them.

  TFF's `ServiceManager.__del__` would otherwise run at interpreter teardown,
  when the modules it uses are gone, and print a spurious exception.
  """
  for obj in gc.get_objects():
    if type(obj).__name__ != 'ServiceManager' or not hasattr(obj, '_process'):
      continue
    process = obj._process  # pylint: disable=protected-access
    if isinstance(process, subprocess.Popen):
      process.terminate()
      try:
        process.wait(timeout=5)
      except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    obj._process = None  # pylint: disable=protected-access
    obj._stub = None  # pylint: disable=protected-access


def stop_workers() -> None:
  """Terminates the TFF worker processes this process started.

  TFF's context is uninstalled too, so that its service managers are freed
  now rather than at interpreter teardown; `init()` installs a fresh one.
  """
  global _initialized
  _stop_service_managers()
  if _initialized:
    # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
    from tensorflow_federated.python.core.impl.context_stack import runtime_error_context
    # pylint: enable=g-import-not-at-top
    context_stack_impl.context_stack.set_default_context(
        runtime_error_context.RuntimeErrorContext())
    _initialized = False
    gc.collect()
  children = psutil.Process().children(recursive=True)
  workers = [c for c in children if 'worker_binary' in ' '.join(_cmdline(c))]
  for w in workers:
    try:
      w.terminate()
    except psutil.NoSuchProcess:
      pass
  psutil.wait_procs(workers, timeout=5)
  for w in workers:
    if w.is_running():
      w.kill()


def _cmdline(proc: psutil.Process) -> list[str]:
  try:
    return proc.cmdline()
  except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
    return []


def init() -> None:
  """Sets TFF's local C++ context (once) and quiets TF/absl logging."""
  global _initialized, _registered
  if _initialized:
    return
  import absl.logging  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel('ERROR')
  absl.logging.set_verbosity(absl.logging.ERROR)
  tff.backends.native.set_sync_local_cpp_execution_context()
  if not _registered:
    atexit.register(stop_workers)
    _registered = True
  _initialized = True
