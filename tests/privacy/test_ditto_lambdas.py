"""Ditto's lambdas from public quantities: the point-estimation closed form
in a model's units."""

import pytest

from tff_hdp.estimation import point_estimation_theory as th
from tff_hdp.privacy import ditto_lambdas


def test_noise_aware_lambdas_are_the_closed_form_in_units_of_the_spread():
  """z_j, D_j, d, h and s read as the point-estimation setting with
  N_j = D_j, alpha^2 = s, tau^2 = 1 - s, gamma_j^2 = d z_j^2 / (h D_j^2)."""
  z, counts, ratios = [1.2, 0.6, 0.0], [30, 40, 5], [0.01, 0.1, 1]
  d, h, s = 7850, 2.0, 0.4
  setting = th.LevelsSetting(tuple(counts), 1, 1 - s, s, tuple(
      d * zj**2 / (h * n**2) for zj, n in zip(z, counts)))
  got = ditto_lambdas.noise_aware_lambdas(z, counts, ratios, d, h, s)
  assert got == pytest.approx(th.optimal_level_lambdas(setting, ratios),
                              rel=1e-12)
  # Group 2 carries the largest share of the global model: the largest
  # lambda; without noise every client's share alone would order them.
  assert got[2] > max(got[:2])


def test_more_noise_on_the_global_model_means_smaller_lambdas():
  low = ditto_lambdas.noise_aware_lambdas([0.5, 0.5], [50, 50], [1, 1], 100)
  high = ditto_lambdas.noise_aware_lambdas([5.0, 5.0], [50, 50], [1, 1], 100)
  assert all(h < l for h, l in zip(high, low))


def test_an_empty_group_gets_the_lambda_of_a_client_without_share():
  lams = ditto_lambdas.optimal_lambdas([0.5, 0.5], 0.5, [10, 0], [0.1, 0.0],
                                       [1.0, 1.0])
  v = 0.1 + 1.0 / 10
  assert lams[1] == pytest.approx(0.5 / (0.5 + v), rel=1e-12)


@pytest.mark.parametrize('args,match', [
    (([0.5], 0.5, [10, 10], [0.0, 0.0], [1, 1]), 'one alpha'),
    (([0.5, 0.5], 0.0, [10, 10], [0.0, 0.0], [1, 1]), 'tau'),
    (([0.5, -1], 0.5, [10, 10], [0.0, 0.0], [1, 1]), 'tau'),
    (([0.5, 0.5], 0.5, [10, 10], [0.0, 0.0], [0, 0]), 'weighs anything'),
])
def test_bad_values_are_refused(args, match):
  with pytest.raises(ValueError, match=match):
    ditto_lambdas.optimal_lambdas(*args)
  with pytest.raises(ValueError, match='local share'):
    ditto_lambdas.noise_aware_lambdas([1.0], [10], [1.0], 10, 1.0, 1.0)
