"""What the driver spends compiling a run for N TFF workers.

Every worker runs the same parts of each computation (`up_to_merge`,
`after_merge`; worker 0 also `merge`). TFF's execution context compiles what
it runs with a cache of its own, so with one context per worker the same part
was compiled once per worker; `remote_execution.SharedCompiler` compiles it
once for all. Each row builds a fresh FedAvg process (TFF's
`build_weighted_fed_avg` on the embedded digits task, its first --clients
clients each round), runs `initialize` and --rounds rounds on N workers
started here on 127.0.0.1, and counts TFF's native compiles with their CPU
time and the driver's CPU time over the whole run.

  .venv/bin/python benchmarks/worker_compile.py
  .venv/bin/python benchmarks/worker_compile.py --workers=2,3 --repeats=2
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

_WORKERS = flags.DEFINE_list('workers', ['2', '3'], 'Worker counts, one row '
                             'pair each.')
_CLIENTS = flags.DEFINE_integer('clients', 12, 'Clients per round.')
_ROUNDS = flags.DEFINE_integer('rounds', 3, 'Rounds per run.')
_REPEATS = flags.DEFINE_integer('repeats', 2, 'Runs per row (alternating the '
                                'two compilers; the median is shown).')


def _process(task):
  # pylint: disable-next=g-import-not-at-top
  import tensorflow_federated as tff
  return tff.learning.algorithms.build_weighted_fed_avg(
      task.tff_model_fn(),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))


def _client_data(task):
  return [task.train_dataset(c, seed=0)
          for c in task.client_ids[:_CLIENTS.value]]


def _run(addresses, shared: bool, task,
         data) -> tuple[int, float, float, float]:
  """One run: (compiles, their CPU seconds, driver CPU seconds, wall)."""
  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.backends.native import compiler
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
  from tff_hdp.simulation import remote_execution
  # pylint: enable=g-import-not-at-top
  native = compiler.desugar_and_transform_to_native
  spent = []

  def counted(comp):
    start = time.thread_time()
    try:
      return native(comp)
    finally:
      spent.append(time.thread_time() - start)

  shared_compiler = remote_execution.SharedCompiler
  compiler.desugar_and_transform_to_native = counted
  if not shared:  # each worker's context compiles with its own cache
    remote_execution.SharedCompiler = lambda: counted
  try:
    context = remote_execution.RemoteWorkersContext(addresses, timeout=60)
    with context_stack_impl.context_stack.install(context):
      cpu, wall = time.process_time(), time.perf_counter()
      process = _process(task)
      state = process.initialize()
      for _ in range(_ROUNDS.value):
        state = process.next(state, data).state
      cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
  finally:
    compiler.desugar_and_transform_to_native = native
    remote_execution.SharedCompiler = shared_compiler
  return len(spent), sum(spent), cpu, wall


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top
  import portpicker
  from tff_hdp import tasks
  from tff_hdp.federated_task import TaskOptions
  from tff_hdp.simulation import runtime
  from tff_hdp.simulation import workers
  # pylint: enable=g-import-not-at-top
  runtime.quiet_logging()
  counts = [int(c) for c in _WORKERS.value]
  ports = [portpicker.pick_unused_port() for _ in range(max(counts))]
  processes = [workers.start_worker(p, workers.LOOPBACK, die_with_parent=True,
                                    stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL) for p in ports]
  addresses = [f'{workers.LOOPBACK}:{p}' for p in ports]
  task = tasks.load('digits', TaskOptions())
  data = _client_data(task)
  print(f'FedAvg on digits, {_CLIENTS.value} clients a round, '
        f'{_ROUNDS.value} rounds; median of {_REPEATS.value} runs; load '
        f'average {os.getloadavg()[0]:.2f}')
  print()
  print('| workers | compiler | compiles | compile CPU s | driver CPU s | '
        'wall s |')
  print('|---|---|---|---|---|---|')
  try:
    _run(addresses[:1], True, task, data)  # warm-up: TFF's and Keras' autograph
    for count in counts:
      rows = {True: [], False: []}
      for _ in range(_REPEATS.value):
        for shared in (False, True):
          rows[shared].append(_run(addresses[:count], shared, task, data))
      for shared in (False, True):
        runs = sorted(rows[shared], key=lambda r: r[2])
        n, compile_cpu, cpu, wall = runs[len(runs) // 2]
        name = 'shared (SharedCompiler)' if shared else 'one per worker'
        print(f'| {count} | {name} | {n} | {compile_cpu:.2f} | {cpu:.2f} | '
              f'{wall:.2f} |', flush=True)
  finally:
    for process in processes:
      workers.stop_process(process)


if __name__ == '__main__':
  entry.run(main, __doc__, [('worker_compile.py', [
      'workers', 'clients', 'rounds', 'repeats'])])
