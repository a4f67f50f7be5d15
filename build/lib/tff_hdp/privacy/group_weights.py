"""FedHDP's group ratios from the privacy levels, from public quantities only.

FeO2's Lemma 1 generalized to l groups (SPEC.md §1; the closed form is
`estimation.point_estimation_theory.optimal_level_ratios`, checked there by
Monte Carlo through the aggregator): group j's mean m_j averages its D_j =
q N_j sampled clients' clipped updates and carries Gaussian noise of std
z_j S / D_j per coordinate. With the clients' updates spread around the
population mean with variance sigma_c^2 per coordinate, Var(m_j) =
(sigma_c^2 + z_j^2 S^2 / D_j) / D_j, and the weights of least variance are
w_j ∝ r_j D_j with

    r_j = sigma_c^2 / (sigma_c^2 + z_j^2 S^2 / D_j)

(r = 1 for a group without noise). Writing the spread as a fraction h of
what the clip allows over d coordinates, sigma_c^2 = h S^2 / d, the clip
norm cancels:

    r_j = h D_j / (h D_j + d z_j^2).

z_j (calibrated from the group's public target), D_j (the plan's expected
count), d (the model's size) and h (a setting the user gives) are public:
the ratios read no client's data and cost no privacy. With one private group
and an opted-out one, r_j is the FedHDP paper's r; for MNIST's 1-layer model
(d = 7,850), D = 95 and z = 1.5 it is about 0.005, the order of the r = 0.01
the paper found best by search.
"""

from __future__ import annotations

import math
from typing import Sequence


def noise_aware_ratios(noise_multipliers: Sequence[float],
                       expected_group_sizes: Sequence[float],
                       num_parameters: int,
                       heterogeneity: float = 1.0) -> tuple[float, ...]:
  """Each group's r_j = h D_j / (h D_j + d z_j^2) (module docstring).

  Args:
    noise_multipliers: z_j per group (0: a group without noise, r_j = 1).
    expected_group_sizes: D_j = q N_j per group (0: an empty group, whose
      ratio weighs nothing).
    num_parameters: d, the number of trainable parameters.
    heterogeneity: h > 0, the clients' update spread around the mean as a
      fraction of S^2 (1: as spread as the clip norm allows).

  Returns:
    The ratios, in group order.

  Raises:
    ValueError: a size, count or noise multiplier out of range.
  """
  if len(noise_multipliers) != len(expected_group_sizes):
    raise ValueError('one noise multiplier and one expected size per group.')
  if num_parameters < 1 or not 0 < heterogeneity < math.inf:
    raise ValueError(f'num_parameters >= 1 and a finite heterogeneity > 0 '
                     f'are required, got {num_parameters} and '
                     f'{heterogeneity}.')
  if min(noise_multipliers, default=0) < 0 or min(
      expected_group_sizes, default=0) < 0:
    raise ValueError('noise multipliers and expected group sizes must be '
                     '>= 0.')
  ratios = tuple(
      1.0 if z == 0 else heterogeneity * d / (heterogeneity * d +
                                              num_parameters * z**2)
      for z, d in zip(noise_multipliers, expected_group_sizes))
  if not all(math.isfinite(r) for r in ratios):  # h D_j or d z_j^2 overflowed
    raise ValueError(f'heterogeneity={heterogeneity:g} overflows the ratios '
                     f'h D_j / (h D_j + d z_j^2) (D_j: '
                     f'{", ".join(f"{d:g}" for d in expected_group_sizes)}, '
                     f'z_j: {", ".join(f"{z:g}" for z in noise_multipliers)}'
                     f'); give a smaller one.')
  return ratios
