"""Memory of the local TFF worker over the runs of a sweep, with one worker
for every run and with a fresh one per run (as reproduce.py's sweeps do,
`runtime.renew_local_worker`).

TFF's worker keeps memory from every call it serves. A long-lived
reproduce.py invocation (Robust-HDP's Figure 2: 200-round Fashion-MNIST
runs) had its worker killed by the kernel at 6.3 GB after five or six runs.
Each configuration here is `--runs` runs of Figure 2's setting (Fashion-MNIST
IID, 20 clients, Dist9, c = 3, delta = 1e-4), each training the first
`--rounds` of the 200 rounds its noise is calibrated for, in one process;
the worker's resident memory is read after each run. Seeded DP randomness:
not a privacy run.

  .venv/bin/python benchmarks/worker_memory.py
  .venv/bin/python benchmarks/worker_memory.py --runs=6 --rounds=20
"""

from __future__ import annotations

import os
import sys
import time

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from tff_hdp.cli import entry  # noqa: E402
import psutil  # noqa: E402

_RUNS = flags.DEFINE_integer('runs', 4, 'Runs per configuration.')
_ROUNDS = flags.DEFINE_integer('rounds', 10, 'Rounds trained per run.')
_ALGORITHM = flags.DEFINE_string('algorithm', 'weiavg',
                                 'Untrusted-server rule of every run.')
_DATA_DIR = flags.DEFINE_string(
    'data_dir', None, 'Fashion-MNIST\'s folder (default: fashion_mnist under '
    '$TFF_HDP_DATA or ../shared/data).')

_MB = 2**20


def _worker_mb() -> float:
  workers = [c for c in psutil.Process().children()
             if c.name() == 'worker_binary']
  return sum(w.memory_info().rss for w in workers) / _MB


def _run_sizes(task, renew: bool) -> list[tuple[float, float, float]]:
  """(worker MB, driver MB, seconds) after each of `--runs` runs."""
  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import runtime
  from tff_hdp.simulation import untrusted_setting
  # pylint: enable=g-import-not-at-top
  runtime.stop_workers()
  runtime.init()
  settings = untrusted_setting.UntrustedSettings(
      rounds=200, train_rounds=_ROUNDS.value, epsilon_distribution='dist9',
      delta=1e-4, learning_rate=0.03, clip_norm=3.0,
      eval_every=_ROUNDS.value, checkpoint_every=0,
      unsafe_seeded_dp_randomness=True)
  sizes = []
  for _ in range(_RUNS.value):
    start = time.perf_counter()
    try:
      untrusted_setting.run_algorithm(task, _ALGORITHM.value, settings, None,
                                      progress=False)
    except ValueError as e:
      raise entry.InputError(f'--algorithm={_ALGORITHM.value}: {e}') from None
    sizes.append((_worker_mb(), psutil.Process().memory_info().rss / _MB,
                  time.perf_counter() - start))
    if renew:
      runtime.renew_local_worker()
  return sizes


def main(argv):
  del argv
  from tff_hdp import tasks  # pylint: disable=g-import-not-at-top
  from tff_hdp.federated_task import TaskOptions  # pylint: disable=g-import-not-at-top
  data_dir = (_DATA_DIR.value
              or tasks.REGISTRY['fashion_mnist_iid'].default_data_dir())
  try:
    task = tasks.load('fashion_mnist_iid',
                      TaskOptions(data_dir=data_dir, num_clients=20))
  except ValueError as e:
    raise entry.InputError(f'fashion_mnist_iid: {e}') from None
  print(f'{task.name}: {len(task.client_ids)} clients, {_ALGORITHM.value}, '
        f'{_RUNS.value} runs of {_ROUNDS.value} rounds, {os.cpu_count()} CPU '
        f'cores, load average {os.getloadavg()[0]:.2f}')
  kept, renewed = _run_sizes(task, renew=False), _run_sizes(task, renew=True)
  print('| after run | worker MB, one worker | worker MB, fresh per run | '
        'driver MB, fresh per run | seconds, fresh per run |')
  print('|---|---|---|---|---|')
  for i, (one, fresh) in enumerate(zip(kept, renewed), 1):
    print(f'| {i} | {one[0]:.0f} | {fresh[0]:.0f} | {fresh[1]:.0f} | '
          f'{fresh[2]:.0f} |')
  growth = (kept[-1][0] - kept[0][0]) / max(1, len(kept) - 1)
  print(f'\nOne worker grows {growth:.0f} MB per run of {_ROUNDS.value} '
        f'rounds; a fresh one per run ends each run at '
        f'{min(f[0] for f in renewed):.0f}-{max(f[0] for f in renewed):.0f} MB.')


if __name__ == '__main__':
  entry.run(main, __doc__)
