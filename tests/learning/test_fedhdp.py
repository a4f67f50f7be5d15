"""Privacy plans, algorithm groupings and a short end-to-end training run."""

import csv
import dataclasses
import functools
import math
import os
import random

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.tasks import digits
from tff_hdp.tasks import models
from tff_hdp.privacy import plans
from tff_hdp.privacy import accounting
from tff_hdp.simulation import trusted_setting
from tff_hdp.aggregators.heterogeneous_dp import HeterogeneousDPFactory
from tff_hdp.learning import algorithms
from tff_hdp.learning import fedhdp
from tff_hdp.learning import learning_process
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.simulation import round_loop
from tff_hdp.simulation import selection

pytestmark = pytest.mark.tf


@pytest.fixture(scope='module')
def task():
  return digits.load(clients_per_digit=3, seed=0)


def _choices(ids):
  return pg.assign_opt_out(
      ids, [pg.PrivacyGroup('strict', 2.0, 1e-5),
            pg.PrivacyGroup('loose', 6.0, 1e-5)], 0.2, seed=0)


def test_plan_calibrates_every_private_group_to_its_target():
  ids = list(range(1000))
  choices = _choices(ids)
  sampling = accounting.PoissonSampling(0.05)
  plan = plans.plan_privacy(choices, sampling, 100, plans.ClipSettings())
  z_b = plan.clip_count_stddev
  assert z_b == pytest.approx(0.05 * 0.05 * 1000)
  for j, g in enumerate(choices.groups):
    if g.is_private:
      eps = accounting.epsilon_spent(plan.noise_multipliers[j], z_b, sampling,
                                     100, g.delta)
      assert eps == pytest.approx(g.epsilon, rel=0.01)
      assert plan.expected_group_sizes[j] == pytest.approx(
          0.05 * choices.group_sizes()[j])
    else:
      assert plan.noise_multipliers[j] == 0.0
      assert plan.expected_group_sizes[j] is None
      assert math.isinf(plan.ledger.epsilon(j, 100))
  # The stricter group needs more noise.
  assert plan.noise_multipliers[0] > plan.noise_multipliers[1]


def test_algorithm_groupings():
  """Each trusted record's groups: DP-FedAvg serves the strictest level to
  all, non-private FedAvg none, FedHDP the clients' own at its ratio."""
  choices = _choices(list(range(50)))
  record = functools.partial(algorithms.record, setting=algorithms.TRUSTED)
  dp = record('dp_fedavg').groups(choices, {})
  assert dp.num_groups == 1 and dp.groups[0].epsilon == 2.0
  assert record('nonprivate').groups(choices, {}).groups[0].is_private is False
  ours = record('fedhdp').groups(choices, {'r': 0.1})
  assert [g.ratio for g in ours.groups] == [0.1, 0.1, 1.0]
  assert [g.is_private for g in ours.groups] == [True, True, False]
  with pytest.raises(ValueError, match="unknown trusted-server algorithm 'fedprox'"):
    record('fedprox')


def _factory(task):
  return HeterogeneousDPFactory.from_plan(
      plans.plan_privacy(
          _choices(task.client_ids), accounting.PoissonSampling(0.5), 2,
          plans.ClipSettings(count_stddev=5.0)),
      plans.ClipSettings(count_stddev=5.0), seed=0)


def test_learning_process_is_a_tff_learning_process(task):
  process = fedhdp.build_fedhdp(
      task.tff_model_fn(), _factory(task), 3,
      tff.learning.optimizers.build_sgdm(0.1))
  assert isinstance(process, tff.learning.templates.LearningProcess)


def test_randomly_initialized_models_start_from_the_same_weights(task):
  """A hidden layer's initializer draws at random; each configuration of a
  comparison (and each re-run) must still start from the same weights."""
  mlp = dataclasses.replace(
      task, keras_model_fn=lambda: models.one_layer_nn(64, 10, 16))

  def initial_weights():
    process = fedhdp.build_fedhdp(mlp.tff_model_fn(), _factory(task), 3,
                                  tff.learning.optimizers.build_sgdm(0.1))
    state = process.initialize()
    return [np.asarray(w) for w in process.get_model_weights(state).trainable]

  first, again = initial_weights(), initial_weights()
  assert np.std(first[0]) > 0.05  # drawn, not zeros
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a, b)


def test_seeding_the_initial_weights_leaves_global_generators_alone(task):
  """Keras's initializers are seeded through Python's and NumPy's global
  generators; building a process must not reset a caller's."""
  mlp = dataclasses.replace(
      task, keras_model_fn=lambda: models.one_layer_nn(64, 10, 16))
  random.seed(7)
  np.random.seed(7)
  python_state, numpy_state = random.getstate(), np.random.get_state()
  with tf.Graph().as_default():  # where a TF computation builds the weights
    learning_process.seeded_initial_weights(mlp.tff_model_fn())
  assert random.getstate() == python_state
  np.testing.assert_array_equal(np.random.get_state()[1], numpy_state[1])


def test_short_run_writes_every_round_and_reports_epsilon(task, tmp_path):
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', 8.0, 1e-4)], 0.2, seed=0)
  settings = trusted_setting.Settings(
      rounds=3, sampling=accounting.PoissonSampling(0.5),
      clip=plans.ClipSettings(initial_norm=0.5, count_stddev=5.0),
      eval_every=2)
  summary, weights = trusted_setting.run_configuration(
      task, trusted_setting.Configuration('fedhdp', 0.5), choices, settings,
      str(tmp_path), progress=False)
  with open(os.path.join(tmp_path, 'fedhdp_r0.5', 'rounds.csv')) as f:
    rows = list(csv.DictReader(f))
  assert [int(r['round']) for r in rows] == [1, 2, 3]
  eps = [float(r['epsilon_p']) for r in rows]
  assert eps[0] < eps[1] < eps[2] <= 8.0 * (1 + 1e-6)
  assert rows[1]['acc_g'] and rows[2]['acc_g'] and not rows[0]['acc_g']
  assert os.path.exists(os.path.join(tmp_path, 'fedhdp_r0.5', 'summary.json'))
  private = summary['groups'][0]
  assert private['epsilon_spent'] == pytest.approx(8.0, rel=0.01)
  assert summary['groups'][1]['epsilon_spent'] == math.inf
  assert 0.0 <= summary['metrics']['acc_g'] <= 100.0
  assert all(np.all(np.isfinite(w)) for w in weights.trainable)


def test_sampling_is_seeded_per_round_and_matches_its_event():
  ids = list(range(400))
  a = selection.sample_clients(ids, accounting.PoissonSampling(0.1), 7, 3)
  b = selection.sample_clients(ids, accounting.PoissonSampling(0.1), 7, 3)
  c = selection.sample_clients(ids, accounting.PoissonSampling(0.1), 7, 4)
  assert a == b and a != c
  sizes = [len(selection.sample_clients(
      ids, accounting.PoissonSampling(0.1), 0, t)) for t in range(200)]
  assert np.mean(sizes) == pytest.approx(40, rel=0.05)
  assert len(set(sizes)) > 5  # Poisson: the count varies
  fixed = selection.sample_clients(
      ids, accounting.FixedSizeSampling(400, 25), 0, 1)
  assert len(fixed) == 25 == len(set(fixed))


def test_budget_guard_refuses_rounds_beyond_the_target(task):
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', 8.0, 1e-4)], 0.0, seed=0)
  clip = plans.ClipSettings(count_stddev=5.0)
  sampling = accounting.PoissonSampling(0.5)
  plan = plans.plan_privacy(choices, sampling, 2, clip)
  longer = plan.__class__(**{**plan.__dict__, 'rounds': 3})
  process = fedhdp.build_fedhdp(task.tff_model_fn(),
                                HeterogeneousDPFactory.from_plan(plan, clip, 0), 2,
                                tff.learning.optimizers.build_sgdm(0.1))
  with pytest.raises(round_loop.BudgetExhaustedError,
                     match=r"round 3 refused: privacy group 'p'"):
    round_loop.run_rounds(
        trusted_setting.TrustedRounds(task, process, longer, choices, seed=0,
                                      sampling_seed=0), progress=False)
