"""Oracles for the no-sampling accounting: every participation pattern, by
brute force, and the strategies as dense matrices (small n only)."""

import itertools

import numpy as np

from tff_hdp.privacy import min_separation


def brute_force_sensitivity_squared(strategy: np.ndarray,
                                    model: min_separation.MinSeparation) -> float:
  """max_P ||C sum_{t in P} e_t||^2 over every pattern P the model allows
  (small n only)."""
  n = model.rounds
  gram = strategy.T @ strategy
  best = 0.0
  for m in range(1, model.max_participations + 1):
    for pattern in itertools.combinations(range(n), m):
      if model.allows(pattern):
        best = max(best, float(gram[np.ix_(pattern, pattern)].sum()))
  return best


def tree_strategy_matrix(rounds: int) -> np.ndarray:
  """The tree's strategy as a matrix: one row per dyadic interval inside
  [0, rounds), a 1 for each round it sums (for the brute-force oracle)."""
  rows = []
  h = 0
  while 2 ** h <= rounds:
    for j in range(rounds // 2 ** h):
      row = np.zeros(rounds)
      row[j * 2 ** h:(j + 1) * 2 ** h] = 1.0
      rows.append(row)
    h += 1
  return np.array(rows)


def toeplitz_matrix(c: np.ndarray) -> np.ndarray:
  """The lower-triangular Toeplitz matrix C[i, j] = c_{i-j}."""
  n = c.size
  return np.array([[c[i - j] if i >= j else 0.0 for j in range(n)]
                   for i in range(n)])
