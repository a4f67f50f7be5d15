"""Epsilon and batch-size draws: published mixtures, reproducible by seed."""

import numpy as np
import pytest

from tff_hdp.privacy import heterogeneity


def test_mixgauss_components_are_the_published_ones():
  mix = heterogeneity.EPSILON_DISTRIBUTIONS
  assert mix['mixgauss1'] == heterogeneity.GaussianMixture(
      (0.1, 10.0), (0.01, 0.1), (0.9, 0.1))
  assert mix['mixgauss2'] == heterogeneity.GaussianMixture(
      (1.0, 10.0), (0.1, 0.1), (0.9, 0.1))
  assert mix['mixgauss3'] == heterogeneity.GaussianMixture(
      (0.1, 1.0, 10.0), (0.01, 0.1, 1.0), (0.5, 0.4, 0.1))


@pytest.mark.parametrize('name', ['mixgauss1', 'mixgauss2', 'mixgauss3'])
def test_stratified_draws_have_the_mixture_proportions(name):
  dist = heterogeneity.EPSILON_DISTRIBUTIONS[name]
  eps, components = heterogeneity.sample_epsilons(dist, 10, seed=3)
  counts = np.bincount(components, minlength=len(dist.weights))
  np.testing.assert_array_equal(counts, np.round(np.array(dist.weights) * 10))
  assert np.all(eps > 0)
  for k, (mean, std) in enumerate(zip(dist.means, dist.stddevs)):
    assert np.all(np.abs(eps[components == k] - mean) < 6 * std)


def test_draws_are_reproducible_by_seed():
  dist = heterogeneity.EPSILON_DISTRIBUTIONS['mixgauss3']
  a = heterogeneity.sample_epsilons(dist, 20, seed=1)
  b = heterogeneity.sample_epsilons(dist, 20, seed=1)
  c = heterogeneity.sample_epsilons(dist, 20, seed=2)
  np.testing.assert_array_equal(a[0], b[0])
  assert not np.array_equal(a[0], c[0])
  np.testing.assert_array_equal(heterogeneity.sample_batch_sizes(20, 5),
                                heterogeneity.sample_batch_sizes(20, 5))


def test_unstratified_draws_follow_the_weights_on_average():
  dist = heterogeneity.EPSILON_DISTRIBUTIONS['mixgauss1']
  _, components = heterogeneity.sample_epsilons(dist, 4000, seed=0,
                                                stratified=False)
  assert np.mean(components == 0) == pytest.approx(0.9, abs=0.02)


def test_component_counts_round_by_largest_remainder():
  np.testing.assert_array_equal(
      heterogeneity.component_counts((0.5, 0.4, 0.1), 7), [3, 3, 1])
  assert heterogeneity.component_counts((0.9, 0.1), 20).sum() == 20


def test_batch_sizes_and_uniform_epsilons_stay_in_range():
  sizes = heterogeneity.sample_batch_sizes(200, seed=0)
  assert set(sizes) == {16, 32, 64, 128}
  eps, _ = heterogeneity.sample_epsilons(heterogeneity.Uniform(1.0, 10.0),
                                         50, seed=0)
  assert np.all((eps >= 1.0) & (eps <= 10.0))


def test_bad_mixture_is_refused():
  with pytest.raises(ValueError, match='sum to 1'):
    heterogeneity.GaussianMixture((1.0, 2.0), (0.1, 0.1), (0.5, 0.6))
