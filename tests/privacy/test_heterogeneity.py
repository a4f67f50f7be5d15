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


# SPEC.md §3's 20-client lists, typed from it (the module holds the authors'
# code's 20-, 40- and 60-client lists).
_SPEC_DIST6 = (0.5, 0.46, 0.39, 0.44, 0.21, 0.36, 0.19, 0.51, 1.12, 0.2, 0.49,
               0.19, 0.19, 0.2, 0.2, 0.18, 0.61, 0.15, 0.38, 0.53)
_SPEC_DIST3 = (2.2, 3.66, 0.2, 1.65, 0.9, 0.64, 1.09, 1.86, 2.1, 2.79, 2.21,
               3.49, 1.18, 4.41, 0.33, 3.42, 2.2, 2.88, 0.87, 1.15)
_SPEC_BATCHES = (32, 64, 16, 32, 16, 16, 16, 32, 32, 64, 32, 64, 16, 128, 16,
                 64, 32, 64, 16, 16)


@pytest.mark.parametrize('name,listed', [('dist6', _SPEC_DIST6),
                                         ('dist3', _SPEC_DIST3)])
def test_robust_hdp_lists_pair_each_epsilon_with_its_batch_size(name, listed):
  eps, batches = heterogeneity.client_budgets(name, 20, seed=7)
  np.testing.assert_array_equal(eps, listed)
  np.testing.assert_array_equal(batches, _SPEC_BATCHES)
  # Fixed lists: the seed does not move them.
  np.testing.assert_array_equal(
      heterogeneity.client_budgets(name, 20, seed=0)[0], eps)


@pytest.mark.parametrize('name', ['dist1', 'dist2', 'dist6', 'dist8'])
@pytest.mark.parametrize('num_clients', [40, 60])
def test_longer_lists_extend_the_twenty_client_ones(name, num_clients):
  # SPEC.md §3: for these four the first 20 entries equal the 20-client list;
  # the batch-size lists extend the 20 above for every distribution.
  eps20, _ = heterogeneity.client_budgets(name, 20, seed=0)
  eps, batches = heterogeneity.client_budgets(name, num_clients, seed=0)
  assert len(eps) == len(batches) == num_clients
  np.testing.assert_array_equal(eps[:20], eps20)
  np.testing.assert_array_equal(batches[:20], _SPEC_BATCHES)
  assert set(batches) <= {16, 32, 64, 128} and np.all(eps > 0)


def test_every_robust_hdp_list_is_nine_names_of_three_lengths():
  names = [d for d in heterogeneity.DISTRIBUTIONS if d.startswith('dist')]
  assert names == [f'dist{k}' for k in range(1, 10)]
  for name in names:
    for n in (20, 40, 60):
      assert len(heterogeneity.client_budgets(name, n, 0)[0]) == n


def test_a_list_for_another_client_count_is_refused_naming_the_flag():
  with pytest.raises(ValueError, match=r'--epsilon_distribution=dist2 lists '
                     r'\[20, 40, 60\] clients.*the task has 7'):
    heterogeneity.client_budgets('dist2', 7, seed=0)
  with pytest.raises(ValueError, match="unknown epsilon distribution 'dist0'"):
    heterogeneity.client_budgets('dist0', 20, seed=0)


def test_drawn_distributions_draw_epsilons_and_batch_sizes_by_seed():
  eps, batches = heterogeneity.client_budgets('mixgauss2', 10, seed=4)
  np.testing.assert_array_equal(
      eps, heterogeneity.sample_epsilons(
          heterogeneity.EPSILON_DISTRIBUTIONS['mixgauss2'], 10, 4)[0])
  np.testing.assert_array_equal(batches,
                                heterogeneity.sample_batch_sizes(10, 4))
  eps, _ = heterogeneity.client_budgets('uniform', 50, seed=1)
  assert np.all((eps >= 1.0) & (eps <= 10.0))
