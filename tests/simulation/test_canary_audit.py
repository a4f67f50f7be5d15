"""Canary runs estimate each private group's epsilon from the released
models, checked against the closed-form Gaussian mechanism.

With every client and canary in the one round (q = 1, T = 1) and a fixed
clip, the release is exactly the Gaussian mechanism for every canary: its
clipped update S v / n against noise N(0, (z S / n)^2) on its direction. So
a canary's privacy is mu-GDP with mu = 1 / z, and with several groups whose
means are combined with weights r_j (`HeterogeneousDPFactory`: w_j ~ r_j
n_j) a group-j canary's is mu_j = r_j / sqrt(sum_i r_i^2 z_i^2): every
group's noise lands on every direction. The estimates must land within 20%
of those closed forms, below the printed epsilon, and above it when the
noise is secretly halved.
"""

import dataclasses
import json
import math
import os
import sys

import numpy as np
import pytest
from scipy import optimize

from tff_hdp.tasks import digits
from tff_hdp.tasks import models
from tests import repository
from tff_hdp.aggregators import heterogeneous_dp
from tff_hdp.federated_task import FederatedTask
from tff_hdp.privacy import accounting
from tff_hdp.privacy import empirical_epsilon
from tff_hdp.privacy import plans
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.simulation import selection
from tff_hdp.simulation import trusted_setting

pytestmark = pytest.mark.tf
# The tests that share the module's `task` (and `one_group`): one xdist
# worker builds them.
_TASK = pytest.mark.xdist_group('test_canary_audit_task')

DELTA = 1e-5


@pytest.fixture(scope='module')
def task():
  """40 digits clients and a model of 38,410 parameters: room for thousands
  of near-orthogonal canaries."""
  base = digits.load(clients_per_digit=4, seed=0)
  return FederatedTask('digits_wide', base.client_train, base.client_test,
                       base.server_test,
                       lambda: models.one_layer_nn(64, 10, hidden_units=512),
                       base.loss_fn, base.batch_size)


def _run(task, levels, canaries, monkeypatch=None, noise_scale=1.0):
  """One round, everyone in it; `noise_scale` != 1 is the test-only hook
  of a broken accountant: the aggregator adds that fraction of the noise
  the ledger accounts for."""
  if noise_scale != 1.0:
    original = heterogeneous_dp.CohortHeterogeneousDPFactory.from_plan.__func__

    def scaled(cls, plan, clip, seed, **kwargs):
      return original(cls, dataclasses.replace(
          plan, noise_multipliers=tuple(noise_scale * z
                                        for z in plan.noise_multipliers)),
                      clip, seed, **kwargs)

    monkeypatch.setattr(heterogeneous_dp.CohortHeterogeneousDPFactory,
                        'from_plan', classmethod(scaled))
  settings = trusted_setting.Settings(
      rounds=1, sampling=accounting.PoissonSampling(1.0),
      clip=plans.ClipSettings(initial_norm=0.5, learning_rate=0.0),
      eval_every=1, checkpoint_every=0, canaries=canaries, cohort_size=256,
      unsafe_seeded_dp_randomness=True,
      options={'level_ratios': tuple(g.ratio for g in levels)})
  choices = trusted_setting.client_choices(task, levels, 0.0, seed=0)
  summary, _ = trusted_setting.run_configuration(
      task, trusted_setting.Configuration('fedhdp'), choices, settings, None,
      progress=False)
  return [g for g in summary['groups'] if g['target_epsilon'] is not None]


def gdp(mu):
  return empirical_epsilon.gaussian_epsilon(mu, 1.0, 0.0, 1.0, DELTA)


@pytest.fixture(scope='module')
def one_group(task):
  return _run(task, [pg.PrivacyGroup('p', 4.0, DELTA)], canaries=4000)[0]


@_TASK
def test_the_gaussian_mechanism_is_estimated_within_20_percent(one_group):
  exact = gdp(1 / one_group['noise_multiplier'])  # 3.70 for printed 4
  assert exact < one_group['epsilon_spent'] == pytest.approx(4.0)
  for audit in one_group['empirical_epsilon'].values():
    assert audit['estimate'] == pytest.approx(exact, rel=0.2)
    assert audit['estimate'] < one_group['epsilon_spent']
    assert 0 < audit['lower_bound'] < one_group['epsilon_spent']
    assert (audit['inserted'], audit['unseen'], audit['dim']) == (4000, 4000,
                                                                  38410)
    assert audit['lower_bound'] < audit['lower_bound_capacity']
  assert one_group['canaries'] == 4000
  assert not one_group['audit_alarm']


@_TASK
def test_half_the_accounted_noise_is_caught(task, one_group, monkeypatch):
  """The alarm fires: the estimate's lower limit is above the printed 4."""
  broken = _run(task, [pg.PrivacyGroup('p', 4.0, DELTA)], canaries=4000,
                monkeypatch=monkeypatch, noise_scale=0.5)[0]
  assert broken['epsilon_spent'] == one_group['epsilon_spent']  # the ledger
  assert broken['audit_alarm']
  limit = broken['empirical_epsilon']['final_model']['estimate_lower_limit']
  assert broken['epsilon_spent'] < limit < gdp(2 / broken['noise_multiplier'])
  exact = gdp(2 / broken['noise_multiplier'])  # 8.36
  for name, audit in broken['empirical_epsilon'].items():
    assert audit['estimate'] > 1.5 * broken['epsilon_spent']
    assert audit['estimate'] == pytest.approx(exact, rel=0.2)
    right = one_group['empirical_epsilon'][name]
    assert audit['lower_bound'] > right['lower_bound']


def mu_of(epsilon):
  """The mu whose GDP epsilon at DELTA is `epsilon`."""
  return optimize.brentq(lambda mu: gdp(mu) - epsilon, 1e-9, 50, xtol=1e-12)


CANARIES_PER_LEVEL = 1500


@_TASK
@pytest.mark.parametrize('ratios', [(0.25, 1.0, 4.0), (1.0, 1.0, 1.0)],
                         ids=['ratios_rising_with_epsilon', 'one_ratio'])
def test_every_group_sees_every_groups_noise(task, ratios):
  """Three levels, eps 1, 3.6 and 10. The estimate is compared in mu, where
  its sampling error does not depend on mu: the difference of two means of
  K unit-variance scores has sd sqrt(2 / K) = 0.037."""
  levels = [pg.PrivacyGroup(f'eps{e:g}', e, DELTA, ratio=r)
            for e, r in zip((1.0, 3.6, 10.0), ratios)]
  groups = _run(task, levels, canaries=CANARIES_PER_LEVEL)
  z = [g['noise_multiplier'] for g in groups]
  total = math.sqrt(sum((r * zi)**2 for r, zi in zip(ratios, z)))
  tolerance = 4 * math.sqrt(2 / CANARIES_PER_LEVEL)
  estimated = []
  for g, r in zip(groups, ratios):
    assert gdp(r / total) <= g['epsilon_spent']
    for audit in g['empirical_epsilon'].values():
      assert mu_of(audit['estimate']) == pytest.approx(r / total,
                                                       abs=tolerance)
      assert audit['lower_bound'] < g['epsilon_spent']
    estimated.append(g['empirical_epsilon']['final_model']['estimate'])
  if ratios[0] < ratios[1] < ratios[2]:
    assert estimated == sorted(estimated)  # ordered like the targets
    assert mu_of(estimated[2]) - mu_of(estimated[0]) > 3 * tolerance


def test_real_clients_are_sampled_as_without_canaries():
  ids = [f'c{i}' for i in range(500)]
  sampling = accounting.PoissonSampling(0.1)
  for round_num in range(1, 6):
    alone = selection.sample_clients(ids, sampling, 7, round_num)
    both = selection.sample_clients(ids + [f'canary:p:{k}' for k in
                                           range(300)], sampling, 7,
                                    round_num)
    assert [c for c in both if c in set(ids)] == alone
    assert 10 < len(both) - len(alone) < 50  # about 30 canaries


@_TASK
def test_canaries_need_poisson_sampling_and_a_private_group(task):
  settings = trusted_setting.Settings(
      rounds=1, sampling=accounting.FixedSizeSampling(40, 10), canaries=5)
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', 4.0, DELTA)], 0.0, seed=0)
  with pytest.raises(ValueError,
                     match='--canaries needs --sampling=poisson or device'):
    trusted_setting.run_configuration(
        task, trusted_setting.Configuration('fedhdp', 1.0), choices,
        settings, None, progress=False)
  settings = dataclasses.replace(settings,
                                 sampling=accounting.PoissonSampling(0.5))
  with pytest.raises(ValueError, match='no private group'):
    trusted_setting.run_configuration(
        task, trusted_setting.Configuration('nonprivate'), choices, settings,
        None, progress=False)


FLAGS = ['--task=digits', '--algorithms=fedhdp', '--r=0.5', '--rounds=4',
         '--clients_per_round=20', '--clip_count_stddev=3', '--eval_every=4',
         '--checkpoint_every=1', '--seed=3', '--canaries=40',
         '--cohort_size=16']


def _command(output_dir):
  return [sys.executable, os.path.join(repository.ROOT, 'run_experiment.py'),
          *FLAGS, f'--output_dir={output_dir}']


def _summary(output_dir):
  with open(os.path.join(output_dir, 'fedhdp_r0.5', 'summary.json')) as f:
    return json.load(f)


def _finish(output_dir):
  """The run in this process (`repository.run_program`)."""
  return repository.run_program('run_experiment.py', *FLAGS,
                                f'--output_dir={output_dir}')


def test_a_killed_canary_run_resumes_its_scores(tmp_path):
  """The all-rounds maxima live in the process state, so the resumed run
  reports the uninterrupted run's estimates to the last digit. Only the
  killed run has a process of its own (given the uninterrupted run's secret
  before it starts); the uninterrupted run and the resume run here, where
  the resume reads only its folder."""
  whole, resumed = str(tmp_path / 'whole'), str(tmp_path / 'resumed')
  result = _finish(whole)
  assert result.returncode == 0, result.stderr[-2000:]
  assert '--canaries=40: an audit run' in result.stdout
  repository.plant_secret(whole, resumed, 'fedhdp_r0.5')
  killed_at = repository.kill_after_rows(_command(resumed), resumed,
                                         'fedhdp_r0.5', 2)
  assert 2 <= killed_at < 4, 'the kill must land mid-run'
  result = _finish(resumed)
  assert result.returncode == 0, result.stderr[-2000:]
  audits = [[g.get('empirical_epsilon') for g in _summary(out)['groups']]
            for out in (whole, resumed)]
  assert audits[0] == audits[1] and audits[0][0]['all_rounds']['inserted'] == 40
  assert _summary(whole)['privacy_warnings'][-1].startswith('--canaries=40')
  assert np.isfinite(audits[0][0]['final_model']['estimate'])
