"""MR-MTL's lambda per silo from public quantities: MR-MTL's eq. (7) at one
noise level, and the optimum of a Monte Carlo of the Bayesian
mean-estimation model at two."""

import math

import numpy as np
import pytest

from tff_hdp.estimation import mean_estimation_theory as theory
from tff_hdp.privacy import ditto_lambdas
from tff_hdp.privacy import silo_lambdas


@pytest.mark.parametrize('silos,weights', [(2, [1, 1]), (5, [3] * 5)])
def test_one_noise_level_is_mr_mtl_eq_7(silos, weights):
  setting = theory.MeanEstimationSetting(silos, 40, 1.5, 0.7, 9.0)
  got = silo_lambdas.optimal_silo_lambdas(1.5**2, 0.7**2, [40] * silos,
                                          [81.0] * silos, weights)
  assert got == pytest.approx([setting.optimal_lambda] * silos, rel=1e-12)


def _errors_over_lambda(seed, sizes, sigma_dp, grid, sigma=1.0, tau=0.3,
                        trials=400_000):
  """A Monte Carlo of SPEC.md §2's model, w_bar weighted by n_k: each silo's
  personal error (a + lambda b) / (1 + lambda), its mean square over the
  trials at every lambda of `grid` ([silos, len(grid)]), and the closed
  form's lambdas."""
  rng = np.random.default_rng(seed)
  silos = len(sizes)
  centres = rng.normal(0.0, tau, size=(trials, silos))
  # The sum of n_k samples around the centre, and the silo's DP noise on it.
  sums = (sizes * centres + rng.normal(size=(trials, silos)) * sigma *
          np.sqrt(sizes) + rng.normal(size=(trials, silos)) * sigma_dp)
  local = sums / sizes
  w_bar = local @ (sizes / sizes.sum())
  errors = []
  for k in range(silos):
    a, b = local[:, k] - centres[:, k], w_bar - centres[:, k]
    errors.append((np.mean(a * a) + 2 * grid * np.mean(a * b) +
                   grid**2 * np.mean(b * b)) / (1 + grid)**2)
  return np.array(errors), silo_lambdas.optimal_silo_lambdas(
      sigma**2, tau**2, sizes.tolist(), (sigma_dp**2).tolist(),
      sizes.tolist())


def test_each_silo_is_at_the_optimum_of_a_monte_carlo_of_the_model():
  """Silos of two sizes at two noise levels: each silo's error, over a grid
  of its own lambda, is least at its closed form (within 10%); the noisier
  silos need larger lambdas."""
  grid = np.exp(np.linspace(math.log(1e-3), math.log(30.0), 1200))
  errors, want = _errors_over_lambda(
      0, np.array([30, 30, 60, 30, 30, 60]),
      np.array([2.0, 2.0, 2.0, 20.0, 20.0, 20.0]), grid)
  for k in range(6):
    assert grid[int(np.argmin(errors[k]))] == pytest.approx(want[k], rel=0.1)
  assert min(want[3:]) > 3 * max(want[:3])
  assert want[2] < want[0] and want[5] < want[3]  # more data, less pull


def test_dp_sgd_plans_read_as_the_mean_estimation_model_per_coordinate():
  """z_k, B_k, T_k, n_k, d and h: sigma^2 = c^2 / d, tau^2 = h c^2 / d and
  the epoch's noise sigma_DP^2 / n^2 = z^2 c^2 / (B^2 T) per coordinate,
  whatever the clip norm c (here 3)."""
  z, b, t, n, d, h, c = 1.3, 16.0, 6, 100, 29, 0.4, 3.0
  setting = theory.MeanEstimationSetting(
      4, n, c / math.sqrt(d), c * math.sqrt(h / d), z * c * n / (b * math.sqrt(t)))
  got = silo_lambdas.dp_sgd_lambdas([z] * 4, [b] * 4, [t] * 4, [n] * 4,
                                    [1.0] * 4, d, h)
  assert got == pytest.approx([setting.optimal_lambda] * 4, rel=1e-12)
  stricter = silo_lambdas.dp_sgd_lambdas([z, 3 * z], [b] * 2, [t] * 2,
                                         [n] * 2, [1.0] * 2, d, h)
  assert stricter[1] > 5 * stricter[0]


@pytest.mark.parametrize('args', [
    ([1.0], [16.0], [6], [100], [1.0], 0, 1.0),
    ([1.0], [16.0], [6], [100], [1.0], 10, 0.0),
    ([1.0], [16.0], [6], [100], [1.0], 10, math.inf),
    ([-1.0], [16.0], [6], [100], [1.0], 10, 1.0),
    ([1.0], [0.0], [6], [100], [1.0], 10, 1.0),
])
def test_bad_values_are_refused(args):
  with pytest.raises(ValueError, match='required'):
    silo_lambdas.dp_sgd_lambdas(*args)


def test_a_noisy_silo_carrying_much_of_the_mean_is_best_at_the_global_model():
  """A very noisy silo with 60% of w_bar's weight: its own and the global
  estimate's errors nearly cancel, the closed form's denominator is
  negative, and a Monte Carlo of the model has the error falling over the
  whole grid of lambda, so the answer is inf, not the formula's negative
  value; the quiet silos keep finite lambdas."""
  grid = np.exp(np.linspace(math.log(1e-3), math.log(1e4), 400))
  errors, got = _errors_over_lambda(1, np.array([60, 20, 20]),
                                    np.array([600.0, 1.0, 1.0]), grid)
  assert got[0] == math.inf and all(0 < g < math.inf for g in got[1:])
  assert np.all(np.diff(errors[0]) < 0)


def test_a_step_takes_at_most_the_pull_that_lands_on_the_anchor():
  got = ditto_lambdas.stepped_lambdas([0.5, 40.0, math.inf], 0.05)
  assert got == (0.5, 20.0, 20.0)
  with pytest.raises(ValueError, match='learning rate'):
    ditto_lambdas.stepped_lambdas([1.0], 0.0)
