"""MR-MTL's lambda for each silo, from public quantities only (SPEC.md §2).

SPEC.md §2's mean-estimation model: silo k holds n_k samples x ~ N(w_k,
sigma^2), silo centres w_k ~ N(mu, tau^2), and releases its private mean
w_hat_k = (sum_i x_i + xi_k) / n_k, xi_k ~ N(0, sigma_DP,k^2), whose error
has variance

    sigma_loc,k^2 = sigma^2 / n_k + sigma_DP,k^2 / n_k^2.

MR-MTL's personal estimate minimizes 1/2 (w - w_hat_k)^2 + lambda_k/2 (w -
w_bar)^2 with w_bar = sum_k w_k' w_hat_k (weights w_k' proportional to n_k, or
equal). That is the point-estimation model of
`estimation.point_estimation_theory` with one silo a group (N_k = 1,
alpha_k^2 = sigma_loc,k^2, no server noise, gamma_k = 0): silo k carries the
share c_k = w_k' of w_bar, V = Var(w_bar) = sum_k w_k'^2 (tau^2 +
sigma_loc,k^2), and

    lambda_k* = sigma_loc,k^2 (1 - c_k) / (tau^2 + V - c_k (2 tau^2 +
                sigma_loc,k^2)),

`ditto_lambdas.optimal_lambdas`. With every silo alike (n, sigma_DP, equal
weights 1/K) it is MR-MTL's eq. (7) exactly, lambda* = sigma_loc^2 / tau^2 =
(sigma^2 + sigma_DP^2 / n) / (n tau^2), for any K; a silo with more noise
trusts its own estimate less and gets a larger lambda.

`dp_sgd_lambdas` reads it in a model's units, per coordinate of the d
parameters, in units of c^2 / d (c: the clip norm, which cancels), with a
unit-curvature loss as in the mean-estimation model:
  - sigma^2 = 1: a clipped per-example gradient has norm <= c, as spread as
    the clip allows;
  - tau^2 = h: the silos' mean gradients spread h c^2 / d around theirs
    (h: --heterogeneity, a public assumption, as for FedHDP's ratios);
  - the silo's local estimate is one epoch of its DP-SGD (MR-MTL's round,
    Ditto's personal epoch): T_k steps, each adding noise z_k c to a batch sum
    of expected size B_k = q_k n_k, so the epoch's mean gradient carries noise
    z_k^2 c^2 / (B_k^2 T_k), i.e. sigma_DP,k^2 / n_k^2 = d z_k^2 / (B_k^2 T_k).
z_k (calibrated for the silo's public target), q_k, T_k, n_k, d and h are
public: the lambdas read no example and cost no privacy.
"""

from __future__ import annotations

import math
from typing import Sequence

from tff_hdp.privacy import ditto_lambdas
from tff_hdp.privacy import plans


def optimal_silo_lambdas(sigma2: float, tau2: float,
                         num_examples: Sequence[int],
                         sigma_dp2s: Sequence[float],
                         weights: Sequence[float]) -> tuple[float, ...]:
  """Each silo's lambda_k* (module docstring), in SPEC.md §2's terms.

  Args:
    sigma2: sigma^2 >= 0, the per-sample variance around a silo's centre.
    tau2: tau^2 > 0, the spread of the silo centres.
    num_examples: n_k >= 1 per silo.
    sigma_dp2s: sigma_DP,k^2 >= 0, the noise variance on silo k's sum.
    weights: w_bar's weight of each silo (normalized here).

  Raises:
    ValueError: the lengths differ, or a value is out of range.
  """
  if len(sigma_dp2s) != len(num_examples) or sigma2 < 0 or min(
      num_examples) < 1:
    raise ValueError('one sigma_DP^2 per silo, sigma^2 >= 0 and n_k >= 1 '
                     'are required.')
  local = [sigma2 / n + s2 / n**2 for n, s2 in zip(num_examples, sigma_dp2s)]
  silos = len(local)
  return ditto_lambdas.optimal_lambdas(local, tau2, [1] * silos,
                                       [0.0] * silos, weights)


def dp_sgd_lambdas(noise_multipliers: Sequence[float],
                   expected_batch_sizes: Sequence[float],
                   steps_per_epoch: Sequence[int],
                   num_examples: Sequence[int], weights: Sequence[float],
                   num_parameters: int,
                   heterogeneity: float = 1.0) -> tuple[float, ...]:
  """Each silo's lambda from its DP-SGD plan (module docstring).

  Args:
    noise_multipliers: z_k per silo.
    expected_batch_sizes: B_k = q_k n_k per silo.
    steps_per_epoch: T_k per silo.
    num_examples: n_k per silo.
    weights: w_bar's weight of each silo.
    num_parameters: d, the model's trainable parameters.
    heterogeneity: h > 0, the silos' spread as a fraction of c^2 / d.

  Raises:
    ValueError: a value out of range.
  """
  if num_parameters < 1 or not 0 < heterogeneity < math.inf or min(
      [*expected_batch_sizes, *steps_per_epoch]) <= 0 or min(
          noise_multipliers) < 0:
    raise ValueError(f'd >= 1, a finite heterogeneity > 0, B_k, T_k > 0 and '
                     f'z_k >= 0 are required, got d={num_parameters}, '
                     f'h={heterogeneity}.')
  sigma_dp2s = [num_parameters * z**2 * n**2 / (b**2 * t) for z, b, t, n in zip(
      noise_multipliers, expected_batch_sizes, steps_per_epoch, num_examples)]
  return optimal_silo_lambdas(1.0, heterogeneity, num_examples, sigma_dp2s,
                              weights)


def plan_lambdas(silo_plans: Sequence[plans.ClientPrivacy],
                 num_parameters: int, heterogeneity: float = 1.0,
                 weighted: bool = True) -> tuple[float, ...]:
  """`dp_sgd_lambdas` of each silo's plan: its z_k, q_k n_k, epoch's steps
  and n_k, w_bar weighing silos by n_k (`weighted`) or equally."""
  return dp_sgd_lambdas(
      [p.noise_multiplier for p in silo_plans],
      [p.expected_batch_size for p in silo_plans],
      [p.steps_per_epoch for p in silo_plans],
      [p.num_examples for p in silo_plans],
      [float(p.num_examples) if weighted else 1.0 for p in silo_plans],
      num_parameters, heterogeneity)
