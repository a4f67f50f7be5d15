"""The noise multiplier Robust-HDP's published numbers were computed with.

The authors' code (Saber-mm/HDPFL, `algs/moments_accountant.compute_z`)
calibrates each client's z by bisection on an RDP accountant evaluated at
orders 1.1, 1.2, ..., 10.9 and 12, ..., 64, over `E N_i / b_i` steps, converts
RDP to epsilon with the classic bound `eps = rdp(a) + log(1/delta) / (a - 1)`,
and rounds z to two decimals. Only the reproduction of their Table 2 uses it
(benchmarks/noise_power.py): it explains the published values. This project
accounts with dp_accounting's own orders and conversion, which are tighter.
The RDP values are dp_accounting's; only the authors' choices are repeated.
"""

from __future__ import annotations

import functools
import math

import dp_accounting
from dp_accounting import rdp
import numpy as np

ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 65)))


@functools.lru_cache(maxsize=None)
def _step_rdp(q: float, z: float) -> np.ndarray:
  accountant = rdp.RdpAccountant(orders=list(ORDERS))
  accountant.compose(dp_accounting.PoissonSampledDpEvent(
      q, dp_accounting.GaussianDpEvent(z)))
  return np.asarray(accountant.rdp)


def epsilon(z: float, num_examples: int, batch_size: int, rounds: int,
            delta: float) -> float:
  """epsilon after `rounds` epochs of `num_examples / batch_size` steps."""
  steps = rounds * num_examples / batch_size
  total = steps * _step_rdp(batch_size / num_examples, z)
  return float(np.min(total - math.log(delta) / (np.asarray(ORDERS) - 1)))


@functools.lru_cache(maxsize=None)
def noise_multiplier(target_epsilon: float, num_examples: int, batch_size: int,
                     rounds: int, delta: float) -> float:
  """Their bisection on [0.001, 1000] for z, rounded to two decimals."""
  low, high = 0.001, 1000.0
  for _ in range(50):
    mid = (low + high) / 2
    if epsilon(mid, num_examples, batch_size, rounds, delta) > target_epsilon:
      low = mid
    else:
      high = mid
  return round((low + high) / 2, 2)
