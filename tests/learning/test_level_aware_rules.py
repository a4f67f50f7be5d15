"""The trusted rules that use each level's privacy target: FedHDP's ratios
(without --r, each level's noise-aware ratio, FeO2's weights for l levels,
`privacy.group_weights`; --level_ratios, one per level), printed, recorded
and applied by the real aggregator (rounds.csv's weight columns); and
individualized sampling, each group at its own rate with one noise
multiplier, its printed epsilons dp_accounting's."""

import csv
import os

import dp_accounting
from dp_accounting import rdp

import numpy as np
import pytest

from tff_hdp.tasks import digits
from tff_hdp.learning import algorithms
from tff_hdp.privacy import accounting
from tff_hdp.privacy import plans
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.simulation import trusted_setting

pytestmark = pytest.mark.tf

LEVELS = [pg.PrivacyGroup('eps1', 1.0, 1e-2), pg.PrivacyGroup('eps4', 4.0, 1e-2),
          pg.PrivacyGroup('eps10', 10.0, 1e-2)]
Q = 0.5


@pytest.fixture(scope='module')
def task():
  return digits.load(clients_per_digit=4, seed=0)


def _run(task, out, options=None, config=None, progress=False):
  choices = trusted_setting.client_choices(task, LEVELS, 0.1, seed=0)
  settings = trusted_setting.Settings(
      rounds=2, sampling=accounting.PoissonSampling(Q),
      clip=plans.ClipSettings(initial_norm=0.5, count_stddev=5.0),
      eval_every=2, options=options or {})
  config = config or trusted_setting.Configuration('fedhdp')
  summary, _ = trusted_setting.run_configuration(
      task, config, choices, settings, out, progress=progress)
  with open(os.path.join(out, config.name, 'rounds.csv')) as f:
    return choices, summary, list(csv.DictReader(f))


def _assert_rows_weigh_by(rows, groups, ratios, sizes):
  """Each round's weights are r_j D_j / sum_k r_k D_k with the private
  groups' expected counts D_j = q N_j and the opt-out group's realized one."""
  for row in rows:
    counts = [Q * n if g.is_private else float(row[f'count_{g.name}'])
              for g, n in zip(groups, sizes)]
    want = np.array(ratios) * counts
    got = [float(row[f'weight_{g.name}']) for g in groups]
    np.testing.assert_allclose(got, want / want.sum(), rtol=1e-5)


def test_without_r_each_level_weighs_by_its_noise_aware_ratio(
    task, tmp_path, capsys):
  choices, summary, rows = _run(task, str(tmp_path), progress=True)
  assert summary['configuration'] == 'fedhdp' and summary['ratio'] is None
  groups, sizes = choices.groups, choices.group_sizes()
  d = task.keras_model_fn().count_params()
  ratios = []
  for g, n, entry in zip(groups, sizes, summary['groups']):
    z = entry['noise_multiplier']
    # h D / (h D + d z^2) at h = 1, written out here (not the module's code).
    ratios.append(Q * n / (Q * n + d * z**2) if g.is_private else 1.0)
    assert entry['ratio'] == pytest.approx(ratios[-1], rel=1e-12)
  # A looser level is noised less, so it weighs more per client.
  assert ratios[0] < ratios[1] < ratios[2] < ratios[3] == 1.0
  _assert_rows_weigh_by(rows, groups, ratios, sizes)
  printed = capsys.readouterr().out
  line = next(l for l in printed.splitlines()
              if l.startswith('fedhdp: group ratios'))
  for g, r in zip(groups, ratios):
    assert f'{g.name} {r:.4g}' in line


def test_the_heterogeneity_option_sets_the_spread(task, tmp_path):
  choices, summary, _ = _run(task, str(tmp_path), {'heterogeneity': 0.1})
  d = task.keras_model_fn().count_params()
  for n, entry in zip(choices.group_sizes()[:3], summary['groups'][:3]):
    h_d = 0.1 * Q * n
    assert entry['ratio'] == pytest.approx(
        h_d / (h_d + d * entry['noise_multiplier']**2), rel=1e-12)


def test_level_ratios_set_each_private_level(task, tmp_path):
  choices, summary, rows = _run(task, str(tmp_path),
                                {'level_ratios': (0.2, 0.5, 3.0)})
  ratios = [0.2, 0.5, 3.0, 1.0]
  assert [g['ratio'] for g in summary['groups']] == ratios
  _assert_rows_weigh_by(rows, choices.groups, ratios, choices.group_sizes())


def test_r_and_level_ratios_together_are_refused():
  record = algorithms.record('fedhdp', algorithms.TRUSTED)
  choices = pg.assign_opt_out(list(range(20)), LEVELS, 0.1, seed=0)
  with pytest.raises(ValueError, match='give one of them'):
    record.groups(choices, {'r': 0.1, 'level_ratios': (1.0, 1.0, 1.0)})
  with pytest.raises(ValueError, match='2 ratios for 3 private levels'):
    record.groups(choices, {'level_ratios': (1.0, 1.0)})


def test_individualized_sampling_trains_each_group_at_its_rate(
    task, tmp_path, capsys):
  config = trusted_setting.Configuration('individualized_sampling')
  choices, summary, rows = _run(task, str(tmp_path), config=config,
                                progress=True)
  private = summary['groups'][:3]
  z = private[0]['noise_multiplier']
  rates = [g['sampling_rate'] for g in private]
  assert [g['noise_multiplier'] for g in private] == [z] * 3
  assert rates[0] < rates[1] < rates[2] <= 1.0
  for g, q in zip(private, rates):
    # Both rounds' sum (z) and clip count (z_b = 5, sensitivity 1/2),
    # composed by dp_accounting from scratch at the group's own rate.
    accountant = rdp.RdpAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(
            (z**-2 + 10.0**-2)**-0.5)), 2))
    assert g['epsilon_spent'] == pytest.approx(
        accountant.get_epsilon(g['delta']), rel=1e-9)
    assert g['epsilon_spent'] <= g['target_epsilon'] * (1 + 1e-9)
    assert float(rows[-1][f'epsilon_{g["name"]}']) == pytest.approx(
        g['epsilon_spent'], rel=1e-5)  # rounds.csv: 6 digits
  assert summary['groups'][3]['sampling_rate'] == Q
  assert {'clip_norm', 'fraction_clipped_estimate'} <= set(rows[0])
  printed = capsys.readouterr().out
  assert (f'individualized_sampling: noise multiplier {z:.4g} for every '
          'private group') in printed
