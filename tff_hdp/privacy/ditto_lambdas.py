"""Ditto's lambda for each privacy group, from public quantities only.

The closed form is derived in `estimation.point_estimation_theory` (SPEC.md
§1's point-estimation model with l groups, checked there by Monte Carlo
through the real Ditto step): a client of group j, whose own estimate has
variance alpha_j^2 around its optimum and carries the share c_j = w_j / N_j
of the global estimate (variance V around the population mean), does best
with

    lambda_j = alpha_j^2 (1 - c_j) / (tau^2 + V - c_j (2 tau^2 + alpha_j^2)),
    V = sum_k w_k^2 ((tau^2 + alpha_k^2) / N_k + gamma_k^2).

`optimal_lambdas` is that formula. `noise_aware_lambdas` reads it in a
model's units, as `group_weights` reads FedHDP's ratios: per coordinate the
clients' updates spread around their mean with variance sigma_c^2 = h S^2 / d
(h: --heterogeneity), a share s of it a client's own sampling noise (alpha^2
= s sigma_c^2) and the rest the spread of the clients' optima (tau^2 = (1 -
s) sigma_c^2); group j's mean over its D_j = q_j N_j expected clients carries
the noise z_j S / D_j per coordinate. In units of sigma_c^2, S cancels:

    alpha^2 = s,  tau^2 = 1 - s,  gamma_j^2 = d z_j^2 / (h D_j^2),  N_j = D_j.

z_j (calibrated from the group's public target), D_j, the ratios r_j, d, h
and s are public: the lambdas read no client's data and cost no privacy.
Client-level DP noise enters only the global model, which every group shares,
so the groups' lambdas differ only by their share c_j of it: a group whose
clients carry a larger share (few opted-out clients at ratio 1) leans more on
a global model that holds more of their own data, as FeO2's Lemma 10 has
lambda_np* >= lambda_p*.
"""

from __future__ import annotations

import math
from typing import Sequence

from tff_hdp.privacy import plans


def optimal_lambdas(alpha2s: Sequence[float], tau2: float,
                    sizes: Sequence[float], mean_noise2s: Sequence[float],
                    ratios: Sequence[float]) -> tuple[float, ...]:
  """Each group's lambda_j (module docstring).

  Args:
    alpha2s: alpha_j^2, the variance of a group-j client's own estimate.
    tau2: tau^2 > 0, the spread of the clients' optima.
    sizes: N_j, the clients whose estimates group j's mean averages (0: an
      empty group, which weighs nothing; its lambda is that of a client
      with no share, c_j = 0).
    mean_noise2s: gamma_j^2, the noise variance of group j's mean.
    ratios: r_j; group j weighs w_j = r_j N_j / sum_k r_k N_k.

  Returns:
    The lambdas, in group order; math.inf for a group whose error falls
    for every lambda (`_least_error_pull`): the global estimate is best.

  Raises:
    ValueError: the lengths differ, a variance, size or ratio is negative,
      tau^2 is not > 0, or no group weighs anything.
  """
  groups = len(sizes)
  if not len(alpha2s) == len(mean_noise2s) == len(ratios) == groups:
    raise ValueError('one alpha^2, size, noise variance and ratio per group.')
  if not 0 < tau2 < math.inf or min(
      [*alpha2s, *sizes, *mean_noise2s, *ratios]) < 0:
    raise ValueError('tau^2 > 0 and alpha_j^2, N_j, gamma_j^2, r_j >= 0 are '
                     'required.')
  weighed = [r * n for r, n in zip(ratios, sizes)]
  if sum(weighed) <= 0:
    raise ValueError('no group weighs anything (every r_j N_j is 0).')
  weights = [x / sum(weighed) for x in weighed]
  variance = sum(w**2 * ((tau2 + a2) / n + g2) for w, a2, n, g2 in zip(
      weights, alpha2s, sizes, mean_noise2s) if w > 0)
  shares = [w / n if n > 0 else 0.0 for w, n in zip(weights, sizes)]
  return tuple(_least_error_pull(a2 * (1 - c),
                                 tau2 + variance - c * (2 * tau2 + a2))
               for a2, c in zip(alpha2s, shares))


def _least_error_pull(numerator: float, denominator: float) -> float:
  """The lambda >= 0 with the least error, numerator / denominator where
  that is >= 0. The personal estimate's error, (alpha^2 + 2 lambda C +
  lambda^2 B) / (1 + lambda)^2 with B - C = denominator, alpha^2 - C =
  numerator >= 0, has slope of the sign of numerator - lambda denominator:
  where the denominator is <= 0 (a client whose own noisy estimate carries
  much of the global one: the two errors nearly cancel) it falls for every
  lambda, and the best is the global estimate itself, lambda = inf."""
  return numerator / denominator if denominator > 0 else math.inf


def stepped_lambdas(lambdas: Sequence[float],
                    learning_rate: float) -> tuple[float, ...]:
  """`lambdas` as a gradient step of size `learning_rate` can take them: at
  most 1 / learning_rate, where one step of the pull lam (w - anchor) lands
  on the anchor. A larger lambda only overshoots it (and past 2 /
  learning_rate diverges), and lambda = inf, the global model, is that
  step."""
  if not learning_rate > 0:
    raise ValueError(f'learning rate must be > 0, got {learning_rate}.')
  return tuple(min(lam, 1.0 / learning_rate) for lam in lambdas)


def noise_aware_lambdas(noise_multipliers: Sequence[float],
                        expected_group_sizes: Sequence[float],
                        ratios: Sequence[float], num_parameters: int,
                        heterogeneity: float = 1.0,
                        local_share: float = 0.5) -> tuple[float, ...]:
  """Each group's lambda_j from its z_j, D_j and r_j (module docstring).

  Args:
    noise_multipliers: z_j per group (0: a group without noise).
    expected_group_sizes: D_j = q_j N_j per group.
    ratios: r_j per group, the combination ratios the server applies.
    num_parameters: d, the number of trainable parameters.
    heterogeneity: h > 0, the clients' update spread as a fraction of S^2.
    local_share: s in (0, 1), the share of that spread that is a client's
      own sampling noise.

  Returns:
    The lambdas, in group order.

  Raises:
    ValueError: a value out of range (as `optimal_lambdas`), or h, s or d.
  """
  if num_parameters < 1 or not 0 < heterogeneity < math.inf or not (
      0 < local_share < 1):
    raise ValueError(f'num_parameters >= 1, a finite heterogeneity > 0 and a '
                     f'local share in (0, 1) are required, got '
                     f'{num_parameters}, {heterogeneity} and {local_share}.')
  noise2s = [num_parameters * z**2 / (heterogeneity * d**2) if z > 0 else 0.0
             for z, d in zip(noise_multipliers, expected_group_sizes)]
  return optimal_lambdas([local_share] * len(noise2s), 1 - local_share,
                         expected_group_sizes, noise2s, ratios)


def plan_lambdas(plan: plans.PrivacyPlan, num_parameters: int,
                 heterogeneity: float = 1.0,
                 local_share: float = 0.5) -> tuple[float, ...]:
  """`noise_aware_lambdas` of each group of `plan`: its noise multiplier,
  expected count q_j N_j and ratio as the plan applies them."""
  counts = [q * n for q, n in zip(plan.rates(),
                                  plan.assignment.group_sizes())]
  return noise_aware_lambdas(
      plan.noise_multipliers, counts,
      [g.ratio for g in plan.assignment.groups], num_parameters,
      heterogeneity, local_share)
