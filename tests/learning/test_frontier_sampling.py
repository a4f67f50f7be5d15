"""frontier_sampling through the registry: the factory scales each group's
clipped sum by a_j under one noise draw whose std on the mean is the plan's
noise divisor (measured over many coordinates), and a run prints its tilt
and the frontier and spends each group's epsilon as dp_accounting does at
the group's own rate and multiplier z / a_j."""

import dp_accounting
from dp_accounting import rdp
import numpy as np
import pytest
import tensorflow_federated as tff

from tff_hdp.tasks import digits
from tff_hdp.learning import algorithms
from tff_hdp.privacy import accounting
from tff_hdp.privacy import frontier
from tff_hdp.privacy import planner
from tff_hdp.privacy import plans
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.simulation import trusted_setting

pytestmark = pytest.mark.tf

LEVELS = [pg.PrivacyGroup('eps1', 1.0, 1e-2), pg.PrivacyGroup('eps4', 4.0, 1e-2),
          pg.PrivacyGroup('eps10', 10.0, 1e-2)]
Q, D = 0.5, 20_000


def test_factory_noise_and_mean_are_the_plans():
  choices = pg.assign_opt_out(list(range(40)), LEVELS, 0.25, seed=0)
  clip = plans.ClipSettings(initial_norm=1.0, learning_rate=0.0)
  plan = frontier.plan_frontier(choices, accounting.PoissonSampling(Q), 3,
                                clip, 0.3, num_parameters=D)
  assert min(plan.group_scales) < 0.9  # the scales do differ
  built = algorithms.REGISTRY['frontier_sampling'].build_factory(
      algorithms.TrustedContext(plan, clip, seed=5, cohorts=False,
                                options={}, num_parameters=D))
  l = choices.num_groups
  process = built.factory.create(tff.TensorType(np.float32, [D]),
                                 tff.TensorType(np.float32, [l]))
  members = list(range(24))
  groups = [choices.group_of(c) for c in members]
  # Group j's clients send the constant (j + 1) / (4 sqrt(D)): norm below
  # the clip, so each enters as it is, times a_j.
  values = [np.full(D, (g + 1) / (4 * np.sqrt(D)), np.float32)
            for g in groups]
  eye = np.eye(l, dtype=np.float32)
  result = process.next(process.initialize(), values,
                        [eye[g] for g in groups]).result
  scales, sizes = np.array(plan.group_scales), choices.group_sizes()
  denominator = np.sum(scales * np.array(plan.group_rates) * sizes)
  mean = sum(scales[g] * (g + 1) / (4 * np.sqrt(D))
             for g in groups) / denominator
  released, _ = planner.noise_divisors(plan)
  # The noise on the mean, S / F with S = 1, per coordinate.
  assert np.std(result) == pytest.approx(1 / released, rel=0.03)
  assert np.mean(result) == pytest.approx(mean, abs=4 / released / np.sqrt(D))
  assert built.noise.noise_multipliers == plan.noise_multipliers


def test_a_run_prints_its_tilt_and_spends_dp_accountings_epsilon(
    tmp_path, capsys):
  task = digits.load(clients_per_digit=4, seed=0)
  choices = trusted_setting.client_choices(task, LEVELS, 0.1, seed=0)
  settings = trusted_setting.Settings(
      rounds=2, sampling=accounting.PoissonSampling(Q),
      clip=plans.ClipSettings(initial_norm=0.5, count_stddev=5.0),
      eval_every=2, options={'heterogeneity': 0.5})
  summary, _ = trusted_setting.run_configuration(
      task, trusted_setting.Configuration('frontier_sampling'), choices,
      settings, str(tmp_path), progress=True)
  printed = capsys.readouterr().out
  assert 'frontier_sampling: frontier (t, noise on the mean' in printed
  assert f'frontier_sampling: tilt t = {summary["tilt"]:g} (*)' in printed
  for g in summary['groups'][:3]:
    accountant = rdp.RdpAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(
            g['sampling_rate'], dp_accounting.GaussianDpEvent(
                (g['noise_multiplier']**-2 + 10.0**-2)**-0.5)), 2))
    assert g['epsilon_spent'] == pytest.approx(
        accountant.get_epsilon(g['delta']), rel=1e-9)
    assert g['epsilon_spent'] <= g['target_epsilon'] * (1 + 1e-9)
