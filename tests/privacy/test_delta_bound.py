"""delta at or above 1/N (clients) or 1/n (examples) is refused by default."""

import pytest

from tff_hdp.privacy import plans
from tff_hdp.privacy import accounting
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.learning import noise_aware

pytestmark = pytest.mark.tf

# 40 private clients and 10 opt-out ones: the private group's N_j is 40.
_PRIVATE = 40


def _plan(delta, **kwargs):
  groups = (pg.PrivacyGroup('private_eps3.6', 3.6, delta),
            pg.PrivacyGroup('opt_out'))
  assignment = pg.GroupAssignment(
      groups, {c: int(c >= _PRIVATE) for c in range(_PRIVATE + 10)})
  return plans.plan_privacy(assignment, accounting.PoissonSampling(0.5), 2,
                             plans.ClipSettings(), **kwargs)


@pytest.mark.parametrize('delta', [1 / _PRIVATE, 0.5])
def test_fedhdp_group_delta_at_or_above_one_over_n_is_refused(delta):
  with pytest.raises(accounting.InfeasiblePrivacyTargetError) as error:
    _plan(delta)
  message = str(error.value)
  assert message.startswith(f'--deltas={delta:g} must be below 1/N = 0.025 ')
  assert "privacy group 'private_eps3.6' (40 clients)" in message
  assert '--unsafe_allow_large_delta' in message


def test_fedhdp_group_delta_just_below_or_allowed_is_planned():
  assert _plan(0.99 / _PRIVATE).noise_multipliers[0] > 0
  plan = _plan(0.5, allow_large_delta=True)
  assert plan.noise_multipliers[0] > 0
  assert plan.ledger.budgets[0].delta == 0.5


@pytest.mark.parametrize('delta', [1 / 300, 0.5])
def test_dp_sgd_client_delta_at_or_above_one_over_n_is_refused(delta):
  with pytest.raises(accounting.InfeasiblePrivacyTargetError) as error:
    plans.plan_client_privacy(2.0, delta, 300, 30, 2)
  message = str(error.value)
  assert message.startswith(f'--deltas={delta:g} must be below 1/n = 0.00333 ')
  assert '(300 examples)' in message


def test_dp_sgd_client_delta_just_below_or_allowed_is_planned():
  assert plans.plan_client_privacy(2.0, 0.99 / 300, 300, 30,
                                    2).noise_multiplier > 0
  plan = plans.plan_client_privacy(2.0, 0.5, 300, 30, 2,
                                    allow_large_delta=True)
  assert plan.noise_multiplier > 0 and plan.delta == 0.5
  # Still cached: a sweep calibrates each distinct client once.
  assert plans.plan_client_privacy(2.0, 0.5, 300, 30, 2,
                                    allow_large_delta=True) is plan


@pytest.mark.parametrize('delta,refused,bound', [
    # At 1/400 only client 1, with the most examples, breaks its bound.
    (1 / 400, 'client 1 (400 examples)', '0.0025'),
    (0.5, 'client 0 (300 examples)', '0.00333'),
])
def test_untrusted_clients_are_refused_by_index(delta, refused, bound):
  with pytest.raises(accounting.InfeasiblePrivacyTargetError) as error:
    plans.plan_clients(noise_aware.client_epsilons('weiavg', [1.0, 2.0, 4.0]), delta,
                                  [300, 400, 200], [30, 40, 20], 2)
  message = str(error.value)
  assert message.startswith(f'--deltas={delta:g} must be below 1/n = {bound} ')
  assert refused in message


def test_untrusted_clients_just_below_or_allowed_are_planned():
  sizes, batches = [300, 400, 200], [30, 40, 20]
  below = plans.plan_clients(noise_aware.client_epsilons('weiavg', [1.0, 2.0, 4.0]), 0.99 / 400,
                                        sizes, batches, 2)
  assert [p.num_examples for p in below] == sizes
  allowed = plans.plan_clients(noise_aware.client_epsilons('weiavg', [1.0, 2.0, 4.0]), 0.5,
                                          sizes, batches, 2,
                                          allow_large_delta=True)
  assert all(p.delta == 0.5 and p.noise_multiplier > 0 for p in allowed)
