"""Seconds per untrusted-server round, examples sent or read from files.

Robust-HDP's setting (SPEC.md §3): MNIST in 20 IID clients of about 3,000
examples, batch sizes and epsilons drawn by `--epsilon_distribution`, every
client one epoch of DP-SGD per round. Times `UntrustedRounds.train` (every
client's DP-SGD epoch and the server's rule) after one untimed round
(tracing), with the clients' examples serialized into every round's
datasets ('sent', as remote workers get them) and read by the local worker
from files written once ('files', `tff_hdp.simulation.client_files`, the
default on one machine), for each rule of `--algorithms`, without and with
an audit's canary examples (`--canaries=0,1000`: that many per client,
run_experiment.py --canaries). Seeded DP randomness: not a privacy run.

  .venv/bin/python benchmarks/untrusted_round_speed.py
  .venv/bin/python benchmarks/untrusted_round_speed.py --algorithms=weiavg
  .venv/bin/python benchmarks/untrusted_round_speed.py \
      --algorithms=robust_hdp --data=files --rpca_freeze_after_round=1
  .venv/bin/python benchmarks/untrusted_round_speed.py \
      --algorithms=robust_hdp --data=files --canaries=0,1000
"""

from __future__ import annotations

import os
import sys
import time

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from tff_hdp.cli import entry  # noqa: E402
import numpy as np  # noqa: E402

_ROUNDS = flags.DEFINE_integer('rounds', 3, 'Timed rounds per configuration.')
_DATA = flags.DEFINE_list('data', ['sent', 'files'],
                          'How the examples reach TFF: sent, files.')
_ALGORITHMS = flags.DEFINE_list('algorithms', ['robust_hdp', 'weiavg'],
                                'Untrusted-server rules to time.')
_NUM_CLIENTS = flags.DEFINE_integer('num_clients', 20, 'MNIST IID clients.')
_CANARIES = flags.DEFINE_list(
    'canaries', ['0'], 'Canary examples per client for each configuration '
    '(an audit run, run_experiment.py --canaries); 0: none.')
_DISTRIBUTION = flags.DEFINE_string('epsilon_distribution', 'uniform',
                                    'Clients\' epsilons and batch sizes.')
_FREEZE = flags.DEFINE_integer(
    'rpca_freeze_after_round', None, 'robust_hdp: RPCA in rounds 1..k only '
    '(k=1: every timed round reuses the untimed first round\'s weights).')
_DATA_DIR = flags.DEFINE_string(
    'data_dir', None, 'MNIST\'s folder (default: mnist under $TFF_HDP_DATA '
    'or ../shared/data).')


def _seconds_per_round(task, algorithm: str, files: bool,
                       canaries: int) -> float:
  """Times the rounds of the run `untrusted_setting.run_algorithm` builds."""
  from tff_hdp.simulation import untrusted_setting as us  # pylint: disable=g-import-not-at-top
  settings = us.UntrustedSettings(
      rounds=_ROUNDS.value + 1, epsilon_distribution=_DISTRIBUTION.value,
      unsafe_seeded_dp_randomness=True,
      options={'rpca_freeze_after_round': _FREEZE.value}, canaries=canaries)
  timed = {}

  def run_rounds(program, **kwargs):
    del kwargs
    timed['steps'] = sum(p.steps_per_epoch for p in program.client_plans)
    timed['shapes'] = [np.shape(w) for w in program.weights().trainable]
    program.train(1)
    start = time.perf_counter()
    for r in range(2, program.rounds + 1):
      program.train(r)
    timed['seconds'] = (time.perf_counter() - start) / _ROUNDS.value
    raise StopIteration

  saved = us.round_loop.run_rounds, us.runtime.workers_share_disk
  us.round_loop.run_rounds = run_rounds
  us.runtime.workers_share_disk = lambda: files
  try:
    us.run_algorithm(task, algorithm, settings, None, progress=False)
  except StopIteration:
    pass
  finally:
    us.round_loop.run_rounds, us.runtime.workers_share_disk = saved
  return timed['seconds'], timed['steps'], timed['shapes']


def _noise_seconds(steps: int, shapes) -> float:
  """Seconds to draw a round's DP-SGD noise with `dp_sgd.standard_noise`,
  which every client step calls: one Gaussian tensor per trainable variable
  (best of 3)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_hdp.learning import dp_sgd  # pylint: disable=g-import-not-at-top
  variables = [tf.zeros(shape) for shape in shapes]

  @tf.function
  def draw(steps):
    total = tf.constant(0.0)
    for step in tf.range(steps):
      seed = tf.stack([tf.cast(step, tf.int64), tf.constant(0, tf.int64)])
      for noise in dp_sgd.standard_noise(variables, seed):
        total += tf.reshape(noise, [-1])[0]
    return total

  draw(tf.constant(1))
  times = []
  for _ in range(3):
    start = time.perf_counter()
    draw(tf.constant(steps)).numpy()
    times.append(time.perf_counter() - start)
  return min(times)


def main(argv):
  del argv
  from tff_hdp import tasks  # pylint: disable=g-import-not-at-top
  from tff_hdp.federated_task import TaskOptions  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import runtime  # pylint: disable=g-import-not-at-top
  runtime.init()
  unknown = set(_DATA.value) - {'sent', 'files'}
  if unknown:
    raise entry.InputError(f'--data: unknown {sorted(unknown)}; choose from '
                           'sent, files.')
  data_dir = _DATA_DIR.value or tasks.REGISTRY['mnist_iid'].default_data_dir()
  try:
    task = tasks.load('mnist_iid', TaskOptions(
        data_dir=data_dir, num_clients=_NUM_CLIENTS.value))
  except ValueError as e:
    raise entry.InputError(f'mnist_iid: {e}') from None
  print(f'{task.name}: {len(task.client_ids)} clients, eps ~ '
        f'{_DISTRIBUTION.value}, {_ROUNDS.value} timed rounds, '
        f'{os.cpu_count()} CPU cores, load average '
        f'{os.getloadavg()[0]:.2f}, robust_hdp RPCA '
        + ('every round' if _FREEZE.value is None else
           f'frozen after round {_FREEZE.value}'))
  print('| rule | examples | canaries per client | seconds per round | '
        'vs first |')
  print('|---|---|---|---|---|')
  for algorithm in _ALGORITHMS.value:
    base = None
    for data in _DATA.value:
      for canaries in _CANARIES.value:
        try:
          seconds, steps, shapes = _seconds_per_round(
              task, algorithm, data == 'files', int(canaries))
        except ValueError as e:
          raise entry.InputError(f'--algorithms={algorithm}: {e}') from None
        base = base or seconds
        print(f'| {algorithm} | {data} | {canaries} | {seconds:.3f} | '
              f'{base / seconds:.2f}x |', flush=True)
  if not (_ALGORITHMS.value and _DATA.value):
    return
  draws = steps * sum(int(np.prod(s)) for s in shapes)
  noise = _noise_seconds(steps, shapes)
  print(f'\nDP-SGD noise alone: {steps} client steps a round x '
        f'{draws // steps:,} parameters = {draws / 1e6:.1f} M Gaussian draws; '
        f'drawing them here takes {noise:.3f} s ({draws / noise / 1e6:.0f} M '
        'draws/s), a floor under every rule\'s round on this machine.')


if __name__ == '__main__':
  entry.run(main, __doc__)
