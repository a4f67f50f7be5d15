"""fedhdp_ddp's plan and factory, built as a run builds them (no training):
each level at its own bits, Skellam's epsilon against Agarwal, Kairouz,
Liu's bound computed here from TFF's own build and converted by
dp_accounting, and bits that no noise makes enough refused at planning,
before a run claims its folder."""

import math

from dp_accounting import rdp
import numpy as np
import pytest
import tensorflow_federated as tff
# The test reads TFF's build itself, apart from the adapter the rule uses.
from tensorflow_federated.python.aggregators import distributed_dp

from tff_hdp.aggregators import distributed_group_dp
from tff_hdp.aggregators.distributed_group_dp import (
    CohortDistributedGroupDPFactory, DistributedGroupDPFactory)
from tff_hdp.learning import algorithms
from tff_hdp.privacy import min_separation
from tff_hdp.privacy import plans
from tff_hdp.privacy import privacy_groups as pg

pytestmark = pytest.mark.tf

PER_ROUND, CLIP, DIM, ROUNDS = 20, 0.1, 100, 4
LEVELS = (pg.PrivacyGroup('eps1', 1.0, 1e-6), pg.PrivacyGroup('eps8', 8.0,
                                                              1e-6))
RECORD = algorithms.REGISTRY['fedhdp_ddp']
CLIP_SETTINGS = plans.ClipSettings(initial_norm=CLIP, learning_rate=0.0)


def _options(bits, mechanism, rounding='conditional', slots='every_group'):
  return {'ddp_bits': bits, 'ddp_mechanism': mechanism,
          'ddp_rounding': rounding, 'ddp_slots': slots, 'r': None,
          'level_ratios': None, 'heterogeneity': None}


def _plan(bits, mechanism, rounding='conditional', slots='every_group'):
  """fedhdp_ddp's plan for 200 devices, 20 a round, each at most 2 rounds:
  100 in each level, none opted out."""
  assignment = pg.GroupAssignment(
      LEVELS + (pg.PrivacyGroup('nonprivate'),),
      {i: i % 2 for i in range(200)})
  device = min_separation.DeviceParticipation(200, PER_ROUND, 1, 2)
  return RECORD.plan_privacy(assignment, device, ROUNDS, CLIP_SETTINGS,
                             'expected', allow_large_delta=False,
                             options=_options(bits, mechanism, rounding,
                                              slots),
                             num_parameters=DIM)


def _build(bits, mechanism, cohorts=False, slots='every_group'):
  """(plan, GroupFactory) of fedhdp_ddp, as a run builds them."""
  plan = _plan(bits, mechanism, slots=slots)
  return plan, RECORD.build_factory(algorithms.TrustedContext(
      plan, CLIP_SETTINGS, 0, cohorts,
      _options(bits, mechanism, slots=slots), DIM))


def _skellam_epsilon(z, bits, delta):
  """Agarwal et al.'s Theorem 3.5 at TFF's own build for z (conditional
  rounding at TFF's recommended beta exp(-0.5)): 20 shares of its local
  std, its L1 and L2 bounds, 2 participations composed."""
  factory = distributed_dp.DistributedDpSumFactory(
      z, PER_ROUND, bits, CLIP, beta=math.exp(-0.5),
      mechanism='distributed_skellam')
  state = factory.create(tff.TensorType(np.float32, [DIM])).initialize()
  query = state[0]['inner_agg']['inner_agg_process'].query_state
  l1, l2 = float(query.l1_norm_bound), float(query.l2_norm_bound)
  var = PER_ROUND * float(query.local_stddev)**2
  curve = [2 * (a * l2**2 / (2 * var) + min(
      ((2 * a - 1) * l2**2 + 6 * l1) / (4 * var**2), 3 * l1 / (2 * var)))
           for a in range(2, 257)]
  return rdp.compute_epsilon(range(2, 257), curve, delta)[0]


def test_skellam_levels_at_their_own_bits_meet_their_targets():
  plan, built = _build((12, 16), 'skellam')
  for group, z, bits, noise in zip(LEVELS, plan.noise_multipliers, (12, 16),
                                   built.noise.participations):
    spent = noise.epsilon_spent(z, None, ROUNDS, group.delta)
    assert spent == pytest.approx(_skellam_epsilon(z, bits, group.delta),
                                  rel=1e-6)
    # The least multiplier (to 0.01%): at the target, not below it.
    assert spent <= group.epsilon
    assert spent == pytest.approx(group.epsilon, rel=2e-3)
    assert any(line.startswith(f'{group.name}: {bits} bits, noise '
                               f'multiplier {z:.4g}')
               for line in built.notes)
  assert built.noise.participations[2] is None  # the group without noise
  assert 'Skellam' in built.notes[0]


def test_fewer_bits_need_more_noise_for_the_same_target():
  """Rounding to 12 bits inflates the sensitivity more than at 16: eps 1
  needs a larger multiplier, with either mechanism."""
  for mechanism in ('dgauss', 'skellam'):
    coarse = _plan((12, 12), mechanism)
    fine = _plan((16, 16), mechanism)
    assert coarse.noise_multipliers[0] > fine.noise_multipliers[0]
    assert math.isclose(fine.noise_multipliers[2], 0.0)


def test_bits_no_noise_makes_enough_are_refused_when_planned():
  """8 bits for eps 1 at 20 devices a round: refused by the plan (which a
  run makes before it claims its folder), naming --ddp_bits and the
  level."""
  with pytest.raises(ValueError, match=r"^--ddp_bits=8 for privacy level "
                     r"'eps1': .*no noise multiplier meets its target"):
    _plan((8, 16), 'dgauss')


def test_in_cohorts_the_rule_is_the_cohort_twin_at_the_same_noise():
  """--cohort_size: the record runs cohorts, its factory the cohort twin,
  its noise and accounting the per-device run's."""
  assert RECORD.cohorts
  _, per_device = _build((16, 16), 'dgauss')
  _, cohorts = _build((16, 16), 'dgauss', cohorts=True)
  assert type(per_device.factory) is DistributedGroupDPFactory
  assert type(cohorts.factory) is CohortDistributedGroupDPFactory
  assert cohorts.noise == per_device.noise
  assert cohorts.factory.noise(DIM) == per_device.factory.noise(DIM)


def test_the_group_nobody_is_in_sends_no_slot():
  """None opted out: the devices send the two levels' slots only, and the
  run says so."""
  _, built = _build((16, 16), 'dgauss')
  assert built.factory.slots == (0, 1)
  assert 'devices sends 2 slots' in built.notes[0]


def test_conditional_rounding_needs_less_noise_than_tffs_default():
  """The same target at 16 bits and 100 parameters: TFF's unconditional
  rounding (beta 0) inflates eps 1's sensitivity by sqrt(d) rounding
  steps and needs a larger multiplier than the conditional default; the
  run names its rounding."""
  conditional = _plan((16, 16), 'dgauss')
  unconditional = _plan((16, 16), 'dgauss', 'unconditional')
  assert (unconditional.noise_multipliers[0] >
          conditional.noise_multipliers[0])
  _, built = _build((16, 16), 'dgauss')
  assert 'Conditional rounding to integers.' in built.notes[0]


def test_one_slot_plans_the_same_noise_and_says_what_the_server_learns():
  """--ddp_slots=own_group in cohorts: the same multipliers (every member
  finishing, its members' shares are bounded by the round's), accounted
  for a group's members, and the run says the server learns the groups
  and the threshold below which a group's sum is withheld."""
  every = _plan((16, 16), 'dgauss')
  own, built = _build((16, 16), 'dgauss', cohorts=True, slots='own_group')
  assert own.noise_multipliers == every.noise_multipliers
  assert all(n.members_only for n in built.noise.participations[:2])
  note = built.notes[0]
  assert 'devices sends 1 slot' in note
  assert 'the server learns which device is in which group' in note
  least = distributed_group_dp.MIN_MEMBERS
  assert f'fewer than {least} devices in a round' in note
  [help_text] = [o.help for o in RECORD.options if o.name == 'ddp_slots']
  assert f'fewer than {least} devices in a round' in help_text
  assert 'if only 90% of a group\'s devices finish' in built.notes[1]


def test_one_slot_refuses_a_level_expecting_too_few_devices():
  """20 devices a round, one in 20 at eps 1: it expects 1 device a round,
  fewer than `MIN_MEMBERS`, so most rounds would withhold its sum; the
  plan refuses it naming --ddp_slots and the level (a slot per group
  plans it)."""
  assignment = pg.GroupAssignment(
      LEVELS + (pg.PrivacyGroup('nonprivate'),),
      {i: 0 if i % 20 == 0 else 1 for i in range(200)})
  device = min_separation.DeviceParticipation(200, PER_ROUND, 1, 2)

  def plan(slots):
    return RECORD.plan_privacy(assignment, device, ROUNDS, CLIP_SETTINGS,
                               'expected', allow_large_delta=False,
                               options=_options((16, 16), 'dgauss',
                                                slots=slots),
                               num_parameters=DIM)

  assert plan('every_group').expected_group_sizes[0] == pytest.approx(1.0)
  with pytest.raises(ValueError, match=(
      r"^--ddp_slots=own_group: privacy level 'eps1' expects 1 devices a "
      r'round, .* with 2 or more')):
    plan('own_group')
