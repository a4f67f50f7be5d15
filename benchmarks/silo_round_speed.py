"""Seconds per cross-silo round, one silo per TFF client and packed.

Times `CrossSiloRounds.train` (every silo's DP-SGD epoch, the server's
cluster means, the personal models in and out) after one untimed round
(tracing), for each `--cohort_sizes` value (0: one TFF client per silo;
K > 1: up to K silos per TFF client, `tff_hdp.learning.execution`). The
silos' plans use one fixed noise multiplier instead of a calibration: the
speed does not depend on it, and School's calibration alone takes minutes
(benchmarks/silo_calibration.py).

  .venv/bin/python benchmarks/silo_round_speed.py                 # School
  .venv/bin/python benchmarks/silo_round_speed.py --task=vehicle
"""

from __future__ import annotations

import math
import os
import sys
import time

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from benchmarks import silo_task  # noqa: E402
from tff_hdp.cli import entry  # noqa: E402

_ROUNDS = flags.DEFINE_integer('rounds', 5, 'Timed rounds per execution.')
_COHORT_SIZES = flags.DEFINE_list(
    'cohort_sizes', ['0', '70', '139'],
    'Silos per TFF client to compare (0: one each).')
_NOISE_MULTIPLIER = 1.0


def _plans(task, algorithm, rounds):
  """Every silo's DP-SGD plan at `_NOISE_MULTIPLIER` (not a privacy run)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top
  epochs = 2 if algorithm.personal_epoch else 1
  out = []
  for c in task.client_ids:
    n = task.num_train_examples(c)
    b = min(task.batch_size, n)
    out.append(plans.ClientPrivacy(
        epsilon=math.nan, delta=1e-3, num_examples=n, batch_size=b,
        rounds=rounds, epochs_per_round=epochs,
        sampling_rate=float(np.float32(b / n)),
        steps_per_round=epochs * math.ceil(n / b),
        noise_multiplier=_NOISE_MULTIPLIER))
  return out


def _seconds_per_round(task, algorithm, cohort_size: int) -> float:
  from tff_hdp.simulation import cross_silo_setting as cse  # pylint: disable=g-import-not-at-top
  settings = cse.CrossSiloSettings(
      rounds=_ROUNDS.value + 1, epsilons=(1.0,), delta=1e-3,
      learning_rate=0.1, clip_norm=1.0, regularization=0.1,
      cohort_size=cohort_size, unsafe_seeded_dp_randomness=True)
  program = cse.CrossSiloRounds(
      task, algorithm, settings, cse.build_process(task, algorithm, settings),
      _plans(task, algorithm, settings.rounds),
      list(range(len(task.client_ids))), label='timed')
  program.train(1)
  start = time.perf_counter()
  for r in range(2, settings.rounds + 1):
    program.train(r)
  return (time.perf_counter() - start) / _ROUNDS.value


def main(argv):
  del argv
  from tff_hdp.simulation import runtime  # pylint: disable=g-import-not-at-top
  runtime.init()
  try:
    sizes = [int(v) for v in _COHORT_SIZES.value]
  except ValueError:
    raise entry.InputError('--cohort_sizes must be integers, got '
                           f'{",".join(_COHORT_SIZES.value)!r}.') from None
  if any(k < 0 for k in sizes):
    raise entry.InputError(f'--cohort_sizes must be >= 0, got {sizes}.')
  task, algorithm = silo_task.load()
  print(f'{task.name}: {len(task.client_ids)} silos, {algorithm.name}, batch '
        f'{silo_task.BATCH_SIZE.value}, {_ROUNDS.value} timed rounds, '
        f'{os.cpu_count()} CPU cores, load average '
        f'{os.getloadavg()[0]:.2f}')
  print('| silos per TFF client | seconds per round | vs one per client |')
  print('|---|---|---|')
  base = None
  for k in sizes:
    seconds = _seconds_per_round(task, algorithm, k)
    base = base or seconds
    print(f'| {k if k > 1 else 1} | {seconds:.3f} | {base / seconds:.2f}x |',
          flush=True)


if __name__ == '__main__':
  entry.run(main, __doc__)
