"""TFF's mergeable execution over remote workers, with two TFF 0.87 defects
fixed and a bound on how long a silent worker is waited for.

The driver compiles each computation to TFF's mergeable form
(`mergeable_comp_compiler.compile_to_mergeable_comp_form`), cuts its
CLIENTS-placed argument into one contiguous slice per worker
(`mergeable_comp_execution_context.MergeableCompExecutionContextValue`), runs
`up_to_merge` on every worker, merges the partial aggregates, runs
`after_merge`, and joins the CLIENTS-placed results
(`mergeable_comp_execution_context._repackage_partitioned_values`). Each
worker is a `tff.framework.AsyncExecutionContext` over a `RemoteExecutor`.

As shipped, `tff.backends.native.create_mergeable_comp_execution_context`
(`MergeableCompExecutionContext`, `_run_in_async_context_pool`) has two
defects that this module replaces:
1. Workers run one after another: `RemoteExecutor` makes blocking gRPC calls
   inside `async def`, so one event loop serves one worker at a time. Here
   each worker has its own thread and event loop (`WorkerContext`).
2. Results arrive in completion order: the pool merges partial aggregates and
   concatenates CLIENTS-placed results in whichever order workers finish,
   which permutes per-client outputs (Ditto's personal models, IFCA's
   cluster choices) and makes float sums vary from run to run. Here partials
   are merged and results joined in slice order (`invoke_in_slice_order`).
And TFF retries a call to a dead worker forever; here a worker that answers no
connection for `timeout` seconds while a call waits raises
`WorkerUnavailableError` naming it, as does a hung one: a worker that answers
but is still computing `timeout` seconds after another finished its part. A
worker whose computation fails is named (`WorkerFailedError`). At the start, a worker still silent after
a couple of seconds is named on stderr with what to check, before the wait.
Every worker runs the same parts of a computation, compiled once for all
(`SharedCompiler`), not once per worker.
The local worker of a default run gets the same care (`LocalWorkerContext`,
otherwise TFF's own sync context): a call fails once its process has ended.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, Sequence

import grpc
import tensorflow_federated as tff
from tensorflow_federated.python.common_libs import async_utils
from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.backends.native import compiler
from tensorflow_federated.python.core.backends.native import mergeable_comp_compiler
from tensorflow_federated.python.core.backends.test import compiler as test_compiler
from tensorflow_federated.python.core.impl.compiler import transformations
from tensorflow_federated.python.core.impl.computation import computation_impl
from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
from tensorflow_federated.python.core.impl.execution_contexts import compiler_pipeline
from tensorflow_federated.python.core.impl.context_stack import context_base
from tensorflow_federated.python.core.impl.execution_contexts import async_execution_context
from tensorflow_federated.python.core.impl.execution_contexts import mergeable_comp_execution_context as mergeable
from tensorflow_federated.python.core.impl.executor_stacks import python_executor_stacks
from tensorflow_federated.python.core.impl.executors import remote_executor
from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub
from tensorflow_federated.python.core.impl.types import computation_types
from tensorflow_federated.python.core.impl.types import placements
from tensorflow_federated.python.core.impl.types import type_analysis
from tensorflow_federated.python.core.impl.types import type_conversions

from tff_hdp.simulation import workers
from tff_hdp.simulation.workers import WorkerFailedError
from tff_hdp.simulation.workers import WorkerUnavailableError

# As TFF's local context: messages up to 2 GB.
_MAX_MESSAGE_BYTES = 2 * 1000 * 1000 * 1000
CHANNEL_OPTIONS = (('grpc.max_message_length', _MAX_MESSAGE_BYTES),
                   ('grpc.max_receive_message_length', _MAX_MESSAGE_BYTES),
                   ('grpc.max_send_message_length', _MAX_MESSAGE_BYTES))
# How often a waiting call checks that the workers still answer.
_CHECK_SECONDS = 2.0


def _executor_factory(
    stub: remote_executor_grpc_stub.RemoteExecutorGrpcStub
) -> python_executor_stacks.ResourceManagingExecutorFactory:
  """A `RemoteExecutor` on `stub` per call, as TFF's local context makes."""

  def stack_fn(cardinalities):
    if cardinalities.get(placements.CLIENTS) is None:
      cardinalities[placements.CLIENTS] = 0
    executor = remote_executor.RemoteExecutor(stub)
    executor.set_cardinalities(cardinalities)
    return executor

  return python_executor_stacks.ResourceManagingExecutorFactory(
      executor_stack_fn=stack_fn)


def _probe_channel(address: str) -> grpc.Channel:
  """A channel on a fresh subchannel (not the one the calls use), so a
  worker that is stopped but whose old connection is still open is found
  out too."""
  return grpc.insecure_channel(
      address, options=(('grpc.use_local_subchannel_pool', 1),))


def answers(address: str, timeout: float) -> bool:
  """Whether a gRPC server at `address` completes a new connection."""
  channel = _probe_channel(address)
  try:
    grpc.channel_ready_future(channel).result(timeout=timeout)
    return True
  except grpc.FutureTimeoutError:
    return False
  finally:
    channel.close()


def why_silent(address: str) -> str:
  """What a plain TCP connection to a silent worker's `address` finds."""
  host, port = workers.parse_address(address)
  try:
    socket.create_connection((host, port), timeout=_CHECK_SECONDS).close()
  except ConnectionRefusedError:
    return ('connection refused: nothing listens there; is run_worker.py '
            f'--listen={address} running on that machine?')
  except socket.gaierror:
    return f'unknown host {host}'
  except OSError as e:
    return (f'{e.strerror or "no reply"}: check the address and that a '
            'firewall lets this machine reach the port')
  return 'it accepts connections but does not answer as a TFF worker'


def _announce(addresses: Sequence[str], timeout: float) -> None:
  """A line on stderr per silent worker saying why; raises for a host that
  does not resolve, which waiting does not fix."""
  reasons = {a: why_silent(a) for a in addresses}
  unknown = [f'{a} ({r})' for a, r in reasons.items()
             if r.startswith('unknown host')]
  if unknown:
    raise WorkerUnavailableError(f'--workers: {", ".join(unknown)}')
  for address, reason in reasons.items():
    print(f'waiting up to {timeout:g} s (--worker_timeout) for TFF worker '
          f'{address}: {reason}', file=sys.stderr, flush=True)


def await_workers(addresses: Sequence[str], timeout: float) -> None:
  """Returns once every worker answers; raises `WorkerUnavailableError`
  naming those silent for `timeout` seconds. All are waited for at once;
  when the wait is longer than a few seconds, those still silent after
  `_CHECK_SECONDS` are named on stderr first (`_announce`)."""
  channels = [_probe_channel(a) for a in addresses]
  ready = [grpc.channel_ready_future(c) for c in channels]
  start = time.monotonic()

  def silent(until: float) -> list[str]:
    late = []
    for address, future in zip(addresses, ready):
      try:
        future.result(timeout=max(0.0, until - time.monotonic()))
      except grpc.FutureTimeoutError:
        late.append(address)
    return late

  try:
    late = silent(start + min(timeout, _CHECK_SECONDS))
    if late and timeout > 2 * _CHECK_SECONDS:
      _announce(late, timeout)
    if late:
      late = silent(start + timeout)
    if late:
      named = (f'TFF worker {late[0]} does not' if len(late) == 1 else
               f'TFF workers {", ".join(late)} do not')
      raise WorkerUnavailableError(
          f'{named} answer (waited {timeout:g} s, --worker_timeout); start '
          'it with run_worker.py')
  finally:
    for channel in channels:
      channel.close()


def compile_for_simulation(comp):
  """TFF's native compiler after TFF's test backend has replaced the secure
  sums (`federated_secure_sum_bitwidth`, ...) by plain sums of the same
  integers, which is what they compute: a simulation runs the secure sums'
  arithmetic, not their cryptography."""
  replaced, changed = test_compiler._replace_secure_intrinsics_with_insecure_bodies(  # pylint: disable=protected-access
      comp.to_building_block())
  if changed:
    # In call-dominant form the tree is shallow enough for its proto.
    comp = computation_impl.ConcreteComputation(
        computation_proto=transformations.to_call_dominant(replaced).proto,
        context_stack=context_stack_impl.context_stack)
  return compiler.desugar_and_transform_to_native(comp)


def context_arguments(address: str,
                      compiler_fn: Callable[[object], object] | None = None
                      ) -> dict:
  """The arguments of TFF's (sync or async) execution context over a
  `RemoteExecutor` talking to `address`, as TFF's local context has them
  (`compiler_fn`: a `SharedCompiler`; None: `compile_for_simulation`)."""
  channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
  stub = remote_executor_grpc_stub.RemoteExecutorGrpcStub(channel)
  return dict(executor_fn=_executor_factory(stub),
              compiler_fn=compiler_fn or compile_for_simulation,
              transform_args=tff.tensorflow.transform_args,
              transform_result=tff.tensorflow.transform_result)


class SharedCompiler:
  """`compile_for_simulation` with one cache for the contexts of all
  workers.

  Each worker's context compiles what it runs (`up_to_merge`, `after_merge`
  and, on worker 0, `merge`) with its own cache; these are the same
  computations on every worker, and compiling one costs about as much as a
  short round, so on N workers they were compiled N times. Here the first
  worker to need one compiles it and the others wait for it and reuse it.
  """

  def __init__(self):
    self._pipeline = compiler_pipeline.CompilerPipeline(
        compile_for_simulation)
    self._lock = threading.Lock()

  def __call__(self, comp):
    with self._lock:
      return self._pipeline.compile(comp)


def _reason(error: BaseException) -> str:
  """The first line of why a worker's call failed: the worker's own message
  (a gRPC error's details) where the error or one it chains has one."""
  seen = error
  while seen is not None:
    if isinstance(seen, grpc.RpcError) and seen.details():
      return seen.details().strip().splitlines()[0]
    seen = seen.__cause__ or seen.__context__
  lines = str(error).strip().splitlines()
  return lines[0] if lines else type(error).__name__


def _result_unless_lost(future: concurrent.futures.Future,
                       lost: Callable[[], str | None]):
  """`future`'s result; every `_CHECK_SECONDS` while it is pending,
  `lost()` says why a worker it waits on is gone (then the call is
  cancelled and `WorkerUnavailableError` raised with that reason) or None."""
  while True:
    try:
      return future.result(timeout=_CHECK_SECONDS)
    except concurrent.futures.TimeoutError:
      pass
    why = lost()
    if why:
      future.cancel()
      raise WorkerUnavailableError(why)


class WorkerContext(context_base.AsyncContext):
  """Fix 1: a worker's context on its own thread and event loop, so that its
  blocking gRPC calls do not hold up the other workers. It keeps the
  time since when it has been busy (`busy_since`) or idle (`idle_since`),
  for `RemoteWorkersContext` to tell a hung worker, and names its worker in
  a failure (`WorkerFailedError`)."""

  def __init__(self, address: str, context: context_base.AsyncContext):
    self.address = address
    self._context = context
    self._runner = async_utils.AsyncThreadRunner()
    self._calls = 0
    self.busy_since = None
    self.idle_since = time.monotonic()

  async def invoke(self, comp, arg):
    self._calls += 1
    if self._calls == 1:
      self.busy_since = time.monotonic()
    try:
      return await self._runner.await_coro_and_return_result(
          self._context.invoke(comp, arg))
    except Exception as e:  # pylint: disable=broad-except
      raise WorkerFailedError(f'TFF worker {self.address}: '
                              f'{_reason(e)}') from e
    finally:
      self._calls -= 1
      if not self._calls:
        self.busy_since, self.idle_since = None, time.monotonic()


async def _after_merge(comp, arg_slice, merged, context):
  arg = (merged if arg_slice is None else
         structure.Struct.unnamed(arg_slice, merged))
  return await context.invoke(comp.after_merge, arg)


def _all_equal(type_spec: computation_types.Type) -> bool:
  return (not isinstance(type_spec, computation_types.FederatedType)
          or type_spec.all_equal)


async def invoke_in_slice_order(comp: mergeable.MergeableCompForm,
                                 arg_slices: Sequence[object],
                                 contexts: Sequence[context_base.AsyncContext]):
  """Fix 2: TFF's `_invoke_mergeable_comp_form`, merging and joining in
  slice order. Slice i runs on worker i; merges run on worker 0."""
  pairs = list(zip(arg_slices, contexts))
  partials = await asyncio.gather(
      *(context.invoke(comp.up_to_merge, s) for s, context in pairs))
  merged = partials[0]
  for partial in partials[1:]:
    merged = await contexts[0].invoke(
        comp.merge, structure.Struct.unnamed(merged, partial))
  result_type = comp.after_merge.type_signature.result
  if type_analysis.contains_only(result_type, _all_equal):
    return await _after_merge(comp, arg_slices[0], merged, contexts[0])
  results = await asyncio.gather(
      *(_after_merge(comp, s, merged, context) for s, context in pairs))
  # pylint: disable-next=protected-access
  return mergeable._repackage_partitioned_values(
      list(results), result_type_spec=result_type)


def _how_it_ended(returncode: int) -> str:
  if returncode >= 0:
    return f'exited with status {returncode}'
  name = signal.Signals(-returncode).name
  if -returncode == signal.SIGKILL:
    return (f'was killed ({name}; the kernel\'s out-of-memory killer does '
            'this when memory runs out: see `dmesg`)')
  return f'was killed ({name})'


class LocalWorkerContext(context_base.SyncContext):
  """TFF's sync context (`SyncExecutionContext`) on this process's own
  worker `process` at `address`, except that a call fails with
  `WorkerUnavailableError` once that process has ended (TFF would retry
  forever, and a sweep waiting on the run would wait too)."""

  def __init__(self, address: str, process: subprocess.Popen):
    self._process = process
    self._context = async_execution_context.AsyncExecutionContext(
        **context_arguments(address))
    self._runner = async_utils.AsyncThreadRunner()

  def invoke(self, comp, arg=None):
    future = asyncio.run_coroutine_threadsafe(
        self._context.invoke(comp, arg),
        self._runner._event_loop)  # pylint: disable=protected-access
    return _result_unless_lost(future, self._lost)

  def _lost(self) -> str | None:
    if self._process.poll() is None:
      return None
    return (f'the local TFF worker (process {self._process.pid}) '
            f'{_how_it_ended(self._process.returncode)}; run the same command '
            'again to resume from the last checkpoint')


class RemoteWorkersContext(context_base.SyncContext):
  """Runs each computation across `addresses`, one slice of clients each.

  Results equal a single machine's up to the order of float additions
  (sums are taken per slice, then across slices in slice order).
  """

  def __init__(self, addresses: Sequence[str], timeout: float):
    self.addresses = list(addresses)
    self._timeout = timeout
    shared = SharedCompiler()
    self._contexts = [
        WorkerContext(a, async_execution_context.AsyncExecutionContext(
            **context_arguments(a, shared))) for a in self.addresses]
    self._runner = async_utils.AsyncThreadRunner()
    self._compiler = compiler_pipeline.CompilerPipeline(
        mergeable_comp_compiler.compile_to_mergeable_comp_form)
    await_workers(self.addresses, timeout)

  def invoke(self, comp, arg=None):
    form = self._compiler.compile(comp)
    if arg is None:
      slices = [None] * len(self._contexts)
    else:
      slices = mergeable.MergeableCompExecutionContextValue(
          arg, form.up_to_merge.type_signature.parameter,
          len(self._contexts)).value()
    future = asyncio.run_coroutine_threadsafe(
        invoke_in_slice_order(form, slices, self._contexts),
        self._runner._event_loop)  # pylint: disable=protected-access
    result = self._wait(future)
    return type_conversions.type_to_py_container(
        result, form.after_merge.type_signature.result)

  def _wait(self, future: concurrent.futures.Future):
    """The result, or WorkerUnavailableError if a worker stays silent or
    hangs (`_hung`)."""
    last_answer = {a: time.monotonic() for a in self.addresses}

    def lost() -> str | None:
      hung = self._hung()
      if hung:
        return hung
      for address in self.addresses:
        now = time.monotonic()
        if answers(address, min(_CHECK_SECONDS, self._timeout)):
          last_answer[address] = now
        elif now - last_answer[address] >= self._timeout:
          return (f'TFF worker {address} stopped answering (no answer for '
                  f'{self._timeout:g} s, --worker_timeout); restart it and '
                  'run the same command again to resume from the last '
                  'checkpoint')
      return None

    return _result_unless_lost(future, lost)

  def _hung(self) -> str | None:
    """Why a worker is hung, or None: it answers, but is still computing its
    part `timeout` seconds after another worker finished its own part of
    the same call (the slices are balanced, so they take alike)."""
    now = time.monotonic()
    for busy in self._contexts:
      if busy.busy_since is None:
        continue
      for done in self._contexts:
        if (done.busy_since is None and done.idle_since > busy.busy_since
            and now - done.idle_since >= self._timeout):
          return (f'TFF worker {busy.address} hangs: it answers but has not '
                  f'finished its part {self._timeout:g} s (--worker_timeout) '
                  f'after TFF worker {done.address} finished its own; restart '
                  'it and run the same command again to resume from the '
                  'last checkpoint')
    return None
