"""The two TFF 0.87 defects that remote_execution fixes, each shown on TFF's
own mergeable pool and fixed in ours.

The worker contexts here stand in for `RemoteExecutor`s: they execute each
part of the mergeable form on the local TFF context, and like
`RemoteExecutor` they block inside `async def` (on a barrier, or until the
next slice has finished, which makes workers finish in reverse order).
"""

import threading

import numpy as np
import pytest
import tensorflow_federated as tff
from tensorflow_federated.python.core.backends.native import mergeable_comp_compiler
from tensorflow_federated.python.core.impl.context_stack import context_base
from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
from tensorflow_federated.python.core.impl.execution_contexts import mergeable_comp_execution_context as mergeable
from tensorflow_federated.python.common_libs import async_utils

from tff_hdp.simulation import remote_execution

pytestmark = pytest.mark.tf

_WAIT_SECONDS = 5.0


@tff.tensorflow.computation(np.float32)
def _identity(x):
  return x


@tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
def _sum_and_values(values):
  return tff.federated_sum(values), tff.federated_map(_identity, values)


def _form_and_slices(values, num_workers):
  form = mergeable_comp_compiler.compile_to_mergeable_comp_form(
      _sum_and_values)
  slices = mergeable.MergeableCompExecutionContextValue(
      values, form.up_to_merge.type_signature.parameter, num_workers).value()
  return form, slices


class _BlockingWorker(context_base.AsyncContext):
  """Runs a part locally after blocking the thread it is called on:
  `up_to_merge` waits at `barrier`; with `after`, every part except merges
  waits until worker `after` has finished the same part."""

  def __init__(self, index, form, barrier=None, finished=None):
    self._index = index
    self._form = form
    self._barrier = barrier
    self._finished = finished
    self._local = context_stack_impl.context_stack.current

  async def invoke(self, comp, arg):
    if self._barrier is not None and comp is self._form.up_to_merge:
      self._barrier.wait(timeout=_WAIT_SECONDS)
    part = 'merge' if comp is self._form.merge else (
        'up_to_merge' if comp is self._form.up_to_merge else 'after_merge')
    if self._finished is not None and part != 'merge':
      later = self._finished.get((part, self._index + 1))
      if later is not None:
        assert later.wait(timeout=_WAIT_SECONDS), 'workers ran one at a time'
    result = self._local.invoke(comp, arg)
    if self._finished is not None and part != 'merge':
      self._finished[(part, self._index)].set()
    return result


def _run(coro):
  return async_utils.AsyncThreadRunner().run_coro_and_return_result(coro)


def test_tff_pool_runs_blocking_workers_one_after_another():
  form = mergeable_comp_compiler.compile_to_mergeable_comp_form(
      _sum_and_values)
  barrier = threading.Barrier(2)
  workers = [_BlockingWorker(i, form, barrier) for i in range(2)]
  with pytest.raises(threading.BrokenBarrierError):
    # pylint: disable-next=protected-access
    _run(mergeable._invoke_mergeable_comp_form(
        form, mergeable.MergeableCompExecutionContextValue(
            [1.0, 2.0], form.up_to_merge.type_signature.parameter, 2),
        workers))


def test_each_worker_runs_on_its_own_thread_at_once():
  form, slices = _form_and_slices([1.0, 2.0], 2)
  barrier = threading.Barrier(2)
  workers = [remote_execution.WorkerContext(
      f'worker{i}', _BlockingWorker(i, form, barrier)) for i in range(2)]
  total, values = _run(remote_execution.invoke_in_slice_order(
      form, slices, workers))
  assert total == 3.0
  assert list(values) == [1.0, 2.0]


# In float32, (1 + 1e8) - 1e8 == 0 but (1e8 - 1e8) + 1 == 1: the order in
# which the three slices' sums are merged shows in the total.
_VALUES = [1.0, 1e8, -1e8]


def _reverse_finishing_workers(form):
  finished = {(part, i): threading.Event() for i in range(3)
              for part in ('up_to_merge', 'after_merge')}
  return [remote_execution.WorkerContext(
      f'worker{i}', _BlockingWorker(i, form, finished=finished))
          for i in range(3)]


def test_tff_pool_merges_and_joins_in_completion_order():
  form, _ = _form_and_slices(_VALUES, 3)
  arg = mergeable.MergeableCompExecutionContextValue(
      _VALUES, form.up_to_merge.type_signature.parameter, 3)
  # pylint: disable-next=protected-access
  total, values = _run(mergeable._invoke_mergeable_comp_form(
      form, arg, _reverse_finishing_workers(form)))
  assert list(values) == list(reversed(_VALUES))
  assert total == np.float32(1.0)


def test_slices_merge_and_join_in_slice_order():
  form, slices = _form_and_slices(_VALUES, 3)
  total, values = _run(remote_execution.invoke_in_slice_order(
      form, slices, _reverse_finishing_workers(form)))
  assert list(values) == _VALUES
  assert total == np.float32(0.0)


def test_workers_share_one_compile_of_each_part(monkeypatch):
  """Three workers' threads asking at once for the same parts get one
  compile each, and the same compiled computation."""
  compiled = []
  native = remote_execution.compiler.desugar_and_transform_to_native

  def counting(comp):
    compiled.append(comp)
    return native(comp)

  monkeypatch.setattr(remote_execution.compiler,
                      'desugar_and_transform_to_native', counting)
  form, _ = _form_and_slices([1.0, 2.0, 3.0], 3)
  parts = [form.up_to_merge, form.merge, form.after_merge]
  shared = remote_execution.SharedCompiler()
  barrier = threading.Barrier(3)
  results = [None] * 3

  def worker(i):
    barrier.wait(timeout=_WAIT_SECONDS)
    results[i] = [shared(part) for part in parts]

  threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join(timeout=60)
  assert sorted(map(id, compiled)) == sorted(map(id, parts))
  assert all(r is not None for r in results)
  for i in range(3):
    assert [id(c) for c in results[i]] == [id(c) for c in results[0]]
    assert all(c is not p for c, p in zip(results[i], parts))
