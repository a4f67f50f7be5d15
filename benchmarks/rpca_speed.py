"""Time of Robust-HDP's blocked RPCA noise estimate for growing models.

n = 20 clients' updates (a rank-2 signal plus per-client Gaussian noise) at
p = 1e4, 1e5 and 1e6 parameters, in row blocks of `--block_rows` (200,000 as
in Robust-HDP for CIFAR-10). Reports the wall time of one estimate (after one
untimed warm-up at the smallest size), the iterations and convergence, and
the rank correlation of the estimates with the true noise variances.

  .venv/bin/python benchmarks/rpca_speed.py
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

_CLIENTS = flags.DEFINE_integer('clients', 20, 'Columns n of M.')
_SIZES = flags.DEFINE_list('sizes', ['10000', '100000', '1000000'],
                           'Numbers of parameters p.')
_BLOCK_ROWS = flags.DEFINE_integer('block_rows', 200_000,
                                   'RPCA rows per block.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed.')


def _updates(rng, p, n):
  stds = rng.uniform(0.01, 0.2, n)
  signal = rng.normal(size=(p, 2)) @ rng.normal(size=(2, n)) * 0.05
  return (signal + rng.normal(size=(p, n)) * stds).astype(np.float32), stds


def _rank_correlation(a, b):
  ranks = lambda x: np.argsort(np.argsort(x))
  return np.corrcoef(ranks(a), ranks(b))[0, 1]


def main(argv):
  del argv
  from tff_hdp.aggregators import rpca  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(_SEED.value)
  n = _CLIENTS.value
  warm, _ = _updates(rng, 1000, n)
  rpca.blocked_noise_variances(warm, _BLOCK_ROWS.value)
  print(f'n = {n} clients, blocks of {_BLOCK_ROWS.value} rows, '
        f'{os.cpu_count()} CPU cores')
  print(f'{"p":>10}{"blocks":>8}{"seconds":>10}{"iterations":>12}'
        f'{"converged":>11}{"rank corr":>11}')
  for p in (int(s) for s in _SIZES.value):
    m, stds = _updates(rng, p, n)
    start = time.perf_counter()
    variances, converged, iterations = rpca.blocked_noise_variances(
        m, _BLOCK_ROWS.value)
    seconds = time.perf_counter() - start
    blocks = -(-p // _BLOCK_ROWS.value)
    print(f'{p:>10}{blocks:>8}{seconds:>10.2f}{int(iterations):>12}'
          f'{str(bool(converged)):>11}'
          f'{_rank_correlation(variances.numpy(), stds**2):>11.3f}')


if __name__ == '__main__':
  entry.run(main, __doc__)
