"""A trusted rule with correlated noise, written in user code from the
public seams (`tff_hdp.learning.correlated_noise`), is checked at build as
the built-in ones are: a factory whose streams apply another strategy than
the one its plan accounts, or name none, is refused in one line naming the
record, before any round trains; one whose streams apply the plan's strategy runs, and its
ledger spends what the plan calibrated."""

import glob

import pytest
import tensorflow_federated as tff

from tff_hdp.tasks import digits
from tff_hdp.aggregators import tree_noise
from tff_hdp.learning import algorithms
from tff_hdp.learning import correlated_noise
from tff_hdp.privacy import min_separation
from tff_hdp.privacy import plans
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.simulation import trusted_setting

pytestmark = pytest.mark.tf


@pytest.fixture(scope='module')
def task():
  return digits.load(clients_per_digit=2, seed=0)


def _tree_stream(plan, z, clip, seed, cohorts):
  """A tree stream, whatever strategy `plan` accounts."""
  del plan
  return tree_noise.TreeSumFactory(z, clip, seed, clip_updates=not cohorts)


def _rule(name, private_stream):
  """A user's rule: BLT's strategy in its plan, each private group's stream
  from `private_stream`, a group without guarantee a plain sum."""

  def build(context):
    plan, clip = context.plan, context.clip.initial_norm
    streams = [
        private_stream(plan, z, clip, context.seed + j, context.cohorts)
        if g.is_private else correlated_noise.plain_stream(clip,
                                                           context.cohorts)
        for j, (g, z) in enumerate(zip(plan.assignment.groups,
                                       plan.noise_multipliers))]
    factory = correlated_noise.per_group_streams(context.cohorts)(
        streams, [g.ratio for g in plan.assignment.groups],
        plan.expected_group_sizes, [z * clip for z in plan.noise_multipliers],
        clip)
    return algorithms.GroupFactory(
        factory, algorithms.GroupNoise(plan.noise_multipliers, None),
        seeded=True)

  return algorithms.Algorithm(
      name, algorithms.TRUSTED, name, build, fixed_clip=True,
      privacy_plan=correlated_noise.device_plan(correlated_noise.blt_strategy))


def _run(task, out, name):
  settings = trusted_setting.Settings(
      sampling=min_separation.DeviceParticipation(
          len(task.client_ids), 5, min_separation=1, max_participations=2),
      clip=plans.ClipSettings(initial_norm=0.5, learning_rate=0.0),
      rounds=2, checkpoint_every=0)
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', 8.0, 1e-3)], 0.2, seed=0)
  return trusted_setting.run_configuration(
      task, trusted_setting.Configuration(name), choices, settings, out,
      progress=False)


@pytest.fixture
def registry(monkeypatch):
  """The registry, restored after the test."""
  monkeypatch.setattr(algorithms, 'REGISTRY', dict(algorithms.REGISTRY))
  return algorithms


def _independent_stream(plan, z, clip, seed, cohorts):
  """TFF's own DP sum: fresh noise every round, a stream that names no
  strategy."""
  del plan, seed, cohorts
  return tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      z, 1, clip)


@pytest.mark.parametrize('stream,applied', [
    (_tree_stream, 'TreeNoise'),
    (_independent_stream, 'no noise it names (no noise_strategy)')])
def test_a_user_factory_applying_other_noise_than_its_plan_is_refused(
    task, tmp_path, registry, stream, applied):
  registry.register(_rule('mine', stream))
  with pytest.raises(ValueError) as error:
    _run(task, str(tmp_path), 'mine')
  message = str(error.value)
  assert '\n' not in message, message
  assert message == (
      f"algorithm 'mine': its factory applies {applied} to privacy group "
      "'p', but its plan accounts ToeplitzNoise: the printed epsilon would "
      'not bound the release.')
  assert not glob.glob(str(tmp_path / '*' / 'rounds.csv'))


def test_a_user_factory_applying_its_plans_noise_runs(task, tmp_path,
                                                      registry):
  registry.register(_rule('mine_blt', correlated_noise.correlated_stream))
  summary, _ = _run(task, str(tmp_path), 'mine_blt')
  assert summary['metrics']['acc_g'] is not None
  assert glob.glob(str(tmp_path / 'mine_blt' / 'rounds.csv'))
  (group,) = [g for g in summary['groups'] if g['target_epsilon'] is not None]
  # The plan calibrates z to the target: the ledger spends all of it.
  assert group['epsilon_spent'] == pytest.approx(8.0, rel=1e-3)
