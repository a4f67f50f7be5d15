"""Synthetic federated linear regression with two private levels (FeO2 App. A).

The data's statistics and the closed-form two-level aggregation are checked
by Monte Carlo over seeded populations.
"""

import numpy as np
import pytest

from tff_hdp import tasks
from tff_hdp.tasks import linear_regression as lr
from tff_hdp.federated_task import TaskOptions

pytestmark = pytest.mark.tf

SETTING = lr.LinearRegressionSetting(num_clients=40, dim=10,
                                     samples_per_client=20, tau2=0.1,
                                     beta2=1.0)


def test_task_shapes_design_and_seeding():
  task = tasks.load('linear_regression', TaskOptions(num_clients=30, seed=2))
  assert len(task.client_ids) == 30 and task.metric == 'mse'
  f, x = task.client_train['client0']
  assert f.shape == (20, 10) and x.shape == (20, 1)
  np.testing.assert_allclose(f.T @ f, 20 * np.eye(10), atol=1e-3)
  assert task.server_test[0].shape == (1000, 10)
  assert task.keras_model_fn()(f).shape == (20, 1)
  again = tasks.load('linear_regression', TaskOptions(num_clients=30, seed=2))
  other = tasks.load('linear_regression', TaskOptions(num_clients=30, seed=3))
  np.testing.assert_array_equal(again.client_train['client0'][1], x)
  assert not np.array_equal(other.client_train['client0'][1], x)


def test_test_targets_are_the_noiseless_truth():
  population = lr.generate(SETTING, seed=0)
  f, x = population.server_test
  np.testing.assert_allclose(x[:, 0], f @ population.phi, rtol=1e-4,
                             atol=1e-4)
  f, x = population.test['client3']
  np.testing.assert_allclose(x[:, 0], f @ population.client_phis[3],
                             rtol=1e-4, atol=1e-4)


def test_local_estimates_have_variance_sigma_c2():
  errors = np.concatenate([
      (p.local_estimates() - p.phi).ravel()
      for p in (lr.generate(SETTING, seed) for seed in range(10))])
  assert abs(errors.mean()) < 0.03
  assert errors.var() == pytest.approx(SETTING.sigma_c2, rel=0.08)


def test_two_private_levels_optimal_ratios_match_monte_carlo():
  sizes, gamma2s = [30, 10], [0.002, 0.1]  # level 2 much noisier
  groups = np.repeat([0, 1], sizes)
  optimal = lr.optimal_ratios(SETTING, sizes, gamma2s)
  rng = np.random.default_rng(7)
  squared = {'optimal': [], 'equal': []}
  for seed in range(150):
    population = lr.generate(SETTING, seed)
    noise_std = np.sqrt(np.array(sizes) * gamma2s)[groups][:, None]
    sent = population.local_estimates() + rng.normal(
        size=(SETTING.num_clients, SETTING.dim)) * noise_std
    for name, ratios in (('optimal', optimal), ('equal', [1.0, 1.0])):
      weights = np.array([r * n for r, n in zip(ratios, sizes)])
      weights /= weights.sum()
      estimate = sum(w * sent[groups == k].mean(axis=0)
                     for k, w in enumerate(weights))
      squared[name].append((estimate - population.phi)**2)
  for name, ratios in (('optimal', optimal), ('equal', [1.0, 1.0])):
    theory = lr.server_variance(SETTING, sizes, gamma2s, ratios)
    assert np.mean(squared[name]) == pytest.approx(theory, rel=0.1), name
  inverse_variance = 1.0 / sum(n / (SETTING.sigma_c2 + n * g2)
                               for n, g2 in zip(sizes, gamma2s))
  assert lr.server_variance(SETTING, sizes, gamma2s, optimal) == (
      pytest.approx(inverse_variance))
  assert inverse_variance < 0.7 * lr.server_variance(SETTING, sizes, gamma2s,
                                                     [1.0, 1.0])


def test_non_private_group_gets_ratio_one():
  assert lr.optimal_ratios(SETTING, [5, 15], [0.0, 0.1])[0] == 1.0


@pytest.mark.parametrize('kwargs', [{'num_clients': 0},
                                    {'samples_per_client': 5},
                                    {'beta2': 0.0}, {'tau2': -1.0}])
def test_bad_settings_are_refused(kwargs):
  with pytest.raises(ValueError):
    lr.LinearRegressionSetting(**kwargs)
