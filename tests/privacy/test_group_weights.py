"""The noise-aware ratios are the point-estimation optimum of FedHDP's
per-group means (`point_estimation_theory.optimal_level_ratios`, itself
checked by Monte Carlo through the aggregator), for any clip norm."""

import math

import pytest

from tff_hdp.estimation import point_estimation_theory as th
from tff_hdp.privacy import group_weights


@pytest.mark.parametrize('clip', [0.1, 1.0, 30.0])
@pytest.mark.parametrize('h', [0.05, 1.0])
def test_the_ratios_are_the_optimum_of_the_group_means(clip, h):
  z, sizes, d = (0.0, 4.11, 1.51, 0.86), (5, 33, 33, 33), 7850
  # Group j's mean: noise std z_j S / D_j per coordinate; a client's update
  # spreads h S^2 / d per coordinate (as tau^2, beta^2 negligible).
  setting = th.LevelsSetting(
      sizes, 1, h * clip**2 / d - 1e-12 * clip**2, 1e-12 * clip**2,
      tuple((zj * clip / dj)**2 for zj, dj in zip(z, sizes)))
  assert group_weights.noise_aware_ratios(z, sizes, d, h) == pytest.approx(
      th.optimal_level_ratios(setting), rel=1e-6)


def test_the_paper_setting_gives_the_order_of_its_best_r():
  (r_np, r_p) = group_weights.noise_aware_ratios((0.0, 1.5), (5.0, 95.0),
                                                 7850)
  assert r_np == 1.0 and 0.001 < r_p < 0.01


@pytest.mark.parametrize('args,match', [
    (((1.0,), (1.0, 2.0), 10), 'one noise multiplier and one expected size'),
    (((1.0,), (1.0,), 0), 'num_parameters >= 1'),
    (((1.0,), (1.0,), 10, 0.0), 'heterogeneity > 0'),
    (((1.0,), (1.0,), 10, math.inf), 'finite heterogeneity > 0'),
    (((1.0,), (1.0,), 10, math.nan), 'finite heterogeneity > 0'),
    (((1.5,), (95.0,), 7850, 1e308), 'heterogeneity=1e[+]308 overflows'),
    (((-1.0,), (1.0,), 10), 'noise multipliers and expected group sizes'),
    (((1.0,), (-1.0,), 10), 'noise multipliers and expected group sizes'),
])
def test_out_of_range_inputs_are_refused(args, match):
  with pytest.raises(ValueError, match=match):
    group_weights.noise_aware_ratios(*args)
