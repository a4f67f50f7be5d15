"""Buffered-linear-Toeplitz (BLT) strategies for correlated noise.

A BLT strategy is the lower-triangular Toeplitz matrix C with c_0 = 1 and
c_t = sum_i omega_i theta_i^(t-1) for t >= 1 (Dvijotham et al. 2024;
McMahan et al. 2024). Its inverse is again lower-triangular Toeplitz, so the
noise the model sees, A C^-1 z for the prefix-sum workload A, is generated
round by round with one buffer per theta (O(buffers x d) state). Parameters
are chosen offline (`optimize`) for a participation model and shipped as a
few floats.

Error is measured as the model's noise per round: the root mean over rounds
of ||(A C^-1)_t||^2, times the sensitivity of C (min_separation), relative to
independent noise (C = I) at the same noise multiplier.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os

import numpy as np
import scipy.optimize

from tff_hdp.privacy import min_separation

# Parameters optimized offline (benchmarks/correlated_noise.py), keyed
# "rounds,min_separation,max_participations,buffers".
PARAMETERS_FILE = os.path.join(os.path.dirname(__file__),
                               'blt_parameters.json')


@dataclasses.dataclass(frozen=True)
class BltParameters:
  """Decays `thetas` in (0, 1) and weights `omegas` >= 0 of C's buffers."""

  thetas: tuple[float, ...]
  omegas: tuple[float, ...]

  def __post_init__(self):
    if len(self.thetas) != len(self.omegas) or not self.thetas:
      raise ValueError('a BLT needs as many omegas as thetas, at least one; '
                       f'got {len(self.thetas)} and {len(self.omegas)}.')
    if not all(0 < t < 1 for t in self.thetas):
      raise ValueError(f'BLT decays must lie in (0, 1), got {self.thetas}.')
    if not all(w >= 0 for w in self.omegas) or sum(self.omegas) > 1:
      raise ValueError('BLT weights must be >= 0 and sum to at most 1 (so '
                       f'that c is non-increasing), got {self.omegas}.')

  def coefficients(self, rounds: int) -> np.ndarray:
    """c_0, ..., c_{rounds-1} of C."""
    t = np.arange(rounds - 1, dtype=np.float64)
    c = np.ones(rounds)
    c[1:] = sum(w * th ** t for th, w in zip(self.thetas, self.omegas))
    return c


def inverse_coefficients(c: np.ndarray) -> np.ndarray:
  """Coefficients of C^-1 for lower-triangular Toeplitz C (c_0 = 1): the
  power series 1 / c(x), term by term."""
  n = c.size
  r = np.zeros(n)
  r[0] = 1.0 / c[0]
  for t in range(1, n):
    r[t] = -np.dot(c[1:t + 1], r[t - 1::-1]) / c[0]
  return r


def prefix_noise_power(c: np.ndarray) -> float:
  """Mean over rounds t of ||(A C^-1)_t||^2, A the prefix-sum matrix: A C^-1
  is Toeplitz with the running sums of C^-1's coefficients, and row t holds
  the first t + 1 of them."""
  d = np.cumsum(inverse_coefficients(c))
  return float(np.mean(np.cumsum(d ** 2)))


def relative_rmse(c: np.ndarray, model: min_separation.MinSeparation) -> float:
  """The model's noise per round with strategy c, over independent noise's
  at the same noise multiplier (sensitivity sqrt(k), noise power mean t+1)."""
  power = prefix_noise_power(c[:model.rounds]) * (
      min_separation.toeplitz_sensitivity_squared(c, model))
  return math.sqrt(power / _independent_power(model))


def _independent_power(model: min_separation.MinSeparation) -> float:
  """Independent noise's (C = I): sensitivity^2 k, noise power mean t + 1."""
  return model.reachable_participations * (model.rounds + 1) / 2


def tree_noise_power(model: min_separation.MinSeparation,
                     efficient: bool = False) -> float:
  """The online binary tree's mean over rounds of the prefix noise power at
  noise multiplier 1: each prefix the sum of the nodes of its binary
  decomposition, each node its noisy sum (plain) or, with `efficient`,
  Honaker's online estimate (TF Privacy's `EfficientTreeAggregator`, TFF's
  `tree_aggregation(use_efficient=True)`): a node h levels up has noise
  variance 1 / (2 - 2^-h) of a leaf's."""
  n = model.rounds
  levels = range(n.bit_length())
  variance = [1 / (2 - 2.0 ** -h) if efficient else 1.0 for h in levels]
  return float(np.mean([sum(variance[h] for h in levels if (t + 1) >> h & 1)
                        for t in range(n)]))


def tree_relative_rmse(model: min_separation.MinSeparation,
                       efficient: bool = False) -> float:
  """`relative_rmse` for the online binary tree (`tree_noise_power`)."""
  power = tree_noise_power(model, efficient) * (
      min_separation.tree_sensitivity_squared(model))
  return math.sqrt(power / _independent_power(model))


def optimize(model: min_separation.MinSeparation, buffers: int,
             seed: int = 0, restarts: int = 4) -> BltParameters:
  """The BLT with `buffers` buffers of least `relative_rmse` for `model`
  (Nelder-Mead on unconstrained parameters, a few starts)."""
  rng = np.random.default_rng(seed)

  def unpack(x):
    x = np.clip(x, -30, 30)  # decays and weights stay inside their ranges
    thetas = 1 / (1 + np.exp(-x[:buffers]))
    weights = np.exp(x[buffers:])
    omegas = weights / (1 + weights.sum())  # sum < 1
    return BltParameters(tuple(thetas), tuple(omegas))

  def loss(x):
    return relative_rmse(unpack(x).coefficients(model.rounds), model)

  best = None
  for _ in range(restarts):
    start = np.concatenate([rng.uniform(1, 6, buffers),
                            rng.uniform(-3, 0, buffers)])
    result = scipy.optimize.minimize(loss, start, method='Nelder-Mead',
                                     options={'maxiter': 2000, 'xatol': 1e-6,
                                              'fatol': 1e-9})
    if best is None or result.fun < best.fun:
      best = result
  return unpack(best.x)


@functools.lru_cache(maxsize=64)
def parameters_for(model: min_separation.MinSeparation,
                   buffers: int = 2) -> BltParameters:
  """The BLT for `model`: the shipped optimum (`PARAMETERS_FILE`) where
  there is one, else `optimize`'s (deterministic: seed 0). Public: it
  depends on the participation model alone."""
  with open(PARAMETERS_FILE) as f:
    shipped = json.load(f)
  key = (f'{model.rounds},{model.min_separation},'
         f'{model.max_participations},{buffers}')
  if key in shipped:
    return BltParameters(tuple(shipped[key]['thetas']),
                         tuple(shipped[key]['omegas']))
  return optimize(model, buffers)
