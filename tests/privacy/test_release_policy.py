"""Everything a default run releases is covered by its printed epsilon.

The test holds, per setting (trusted server, untrusted server, cross-silo),
its own list of what may be released and why; every column of `rounds.csv`,
every TensorBoard tag, every key of `summary.json`, every column of the
results table (`results.md`, `results.csv`) and of the sweeps, and every file
that a default run writes must be on it. Statistics of private clients
without noise appear only with `release_unprotected_stats`, which the
summary announces.
"""

import csv
import dataclasses
import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.tasks import digits
from tests import repository
from tff_hdp.learning import algorithms
from tff_hdp.privacy import plans
from tff_hdp.privacy import accounting
from tff_hdp.simulation import trusted_setting
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.privacy import release_policy
from tff_hdp.reporting import tables
from tff_hdp.aggregators import heterogeneous_dp
from tff_hdp.simulation import cross_silo_setting
from tff_hdp.simulation import untrusted_setting

pytestmark = pytest.mark.tf

# What a run may release for groups 'p' (private) and 'opt_out', and why the
# printed epsilon covers it.
COVERED = {
    'round': 'public',
    'clip_norm': 'post-processing of the accounted noisy clip count',
    'fraction_clipped_estimate': 'the accounted noisy clip count itself',
    'count_opt_out': 'opt-out clients chose no guarantee; under Poisson '
                     'sampling their count does not depend on private ones',
    'weight_p': 'r_j times public expected sizes and the opt-out count',
    'weight_opt_out': 'as weight_p',
    'noise_std_p': 'z_j S / (q N_j): public constants and the clip norm',
    'noise_std_opt_out': 'zero',
    'epsilon_p': 'the accountant, a function of public settings',
    'epsilon_opt_out': 'infinite: not released as a number',
    'acc_g': 'the DP model on the server test set (evaluation data)',
    'acc_g_np': 'the DP model on opt-out clients\' data',
    'var_g_np': 'as acc_g_np',
    'acc_l_np': 'opt-out clients\' personal models on their own data',
    'var_l_np': 'as acc_l_np',
    'acc_g_group_p': 'the DP model on the server test examples of labels '
                     'the flags name (--levels_by_label\'s bands)',
    'acc_g_group_opt_out': 'as acc_g_group_p',
    'acc_g_worst': 'the least of the acc_g_group_ columns',
}
NOT_COVERED = {'num_clients', 'count_p', 'train_loss', 'train_accuracy',
               'num_non_finite_updates', 'acc_g_p', 'var_g_p', 'delta_g'}
# The keys of a trusted run's summary.json beside `metrics`.
PUBLIC = 'flags, task and dataset facts'
# Keys of every setting's summary.json.
EVERY_SUMMARY = {
    'privacy_warnings': 'the flags that void part of the promise',
    'seconds': 'wall-clock time: outside every guarantee (README)',
}
TRUSTED_SUMMARY = {
    **{k: PUBLIC for k in (
        'configuration', 'algorithm', 'ratio', 'task', 'metric', 'ditto',
        'dropped_clients', 'rounds', 'sampling', 'sampling_rate',
        'denominator', 'adjacency', 'clip_count_stddev')},
    'privacy_accounted': 'whether the settings are accounted: public',
    'tilt': 'the frontier\'s t: a flag, or chosen from public quantities',
    'noise_divisor': 'the plan\'s noise on the mean, from public quantities',
    **{k: 'which accountant bounds the epsilons: a flag' for k in (
        'accountant', 'pld_discretization')},
    **EVERY_SUMMARY,
    'groups': 'public group sizes and targets, z, the accountant\'s epsilon',
    'group_labels': 'each group\'s labels: the flags\' bands',
    'metrics': 'checked against COVERED',
}


@pytest.fixture(scope='module')
def task():
  return digits.load(clients_per_digit=3, seed=0)


def _run(task, out, clip_lr=0.2, denominator='expected', **flags):
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', 8.0, 1e-4)], 0.2, seed=0)
  settings = trusted_setting.Settings(
      rounds=2, sampling=accounting.PoissonSampling(0.5),
      clip=plans.ClipSettings(initial_norm=0.5, count_stddev=5.0,
                               learning_rate=clip_lr),
      denominator=denominator, eval_every=1, **flags)
  config = trusted_setting.Configuration('fedhdp', 0.5)
  tensorboard = os.path.join(out, 'tensorboard')
  summary, _ = trusted_setting.run_configuration(
      task, config, choices, settings, out, progress=False,
      release_managers=[tff.program.TensorBoardReleaseManager(tensorboard)])
  with open(os.path.join(out, config.name, 'rounds.csv')) as f:
    rows = list(csv.DictReader(f))
  with open(os.path.join(out, config.name, 'summary.json')) as f:
    assert json.load(f) == json.loads(json.dumps(summary).replace(
        'Infinity', 'null'))
  tags = set()
  for path in glob.glob(os.path.join(tensorboard, '*tfevents*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      tags |= {v.tag for v in event.summary.value}
  return summary, rows, tags


def test_a_default_run_releases_only_what_epsilon_covers(task, tmp_path):
  summary, rows, tags = _run(task, str(tmp_path))
  columns = set(rows[0])
  assert columns <= set(COVERED), columns - set(COVERED)
  assert tags <= set(COVERED), tags - set(COVERED)
  assert set(summary['metrics']) <= set(COVERED)
  assert set(summary) <= set(TRUSTED_SUMMARY), set(summary) - set(
      TRUSTED_SUMMARY)
  assert not (columns | tags | set(summary['metrics'])) & NOT_COVERED
  # What is released is really there.
  assert {'clip_norm', 'count_opt_out', 'epsilon_p', 'acc_g',
          'acc_g_np'} <= columns
  assert {'clip_norm', 'epsilon_p', 'acc_g'} <= tags
  assert summary['privacy_warnings'] == []
  assert summary['privacy_accounted'] and summary['sampling'] == 'poisson'
  assert summary['denominator'] == 'expected'
  assert summary['adjacency'] == 'add or remove one client'


def test_groups_scored_on_public_labels_release_only_what_is_covered(
    task, tmp_path):
  """With each group's labels public (`Settings.group_labels`), the worst
  group's and each group's Acc_g on its labels are released every
  evaluation, in rounds.csv, TensorBoard and summary.json, and nothing
  else more."""
  labels = {'p': frozenset({0, 1, 2}), 'opt_out': frozenset({9})}
  summary, rows, tags = _run(task, str(tmp_path), group_labels=labels)
  group_columns = {'acc_g_worst', 'acc_g_group_p', 'acc_g_group_opt_out'}
  assert group_columns <= set(rows[0]) <= set(COVERED)
  assert group_columns <= tags <= set(COVERED)
  assert group_columns <= set(summary['metrics']) <= set(COVERED)
  assert summary['group_labels'] == {'p': [0, 1, 2], 'opt_out': [9]}
  assert set(summary) <= set(TRUSTED_SUMMARY)
  assert all(r['acc_g_worst'] == min(r['acc_g_group_p'],
                                     r['acc_g_group_opt_out'], key=float)
             for r in rows)


def test_noise_aware_weights_read_no_client_data(task, tmp_path):
  """FedHDP without --r weighs its levels by public quantities only: two
  runs whose clients hold other examples (same ids, groups and seeds; the
  seeded randomness so both sample the same clients) release the same
  ratios and the same weight columns, while their models differ."""
  levels = [pg.PrivacyGroup('p', 2.0, 1e-2), pg.PrivacyGroup('q', 8.0, 1e-2)]
  released = []
  for data_seed in (0, 1):
    other = digits.load(clients_per_digit=3, seed=data_seed)
    choices = trusted_setting.client_choices(other, levels, 0.2, seed=0)
    settings = trusted_setting.Settings(
        rounds=2, sampling=accounting.PoissonSampling(0.5),
        clip=plans.ClipSettings(initial_norm=0.5, count_stddev=5.0),
        eval_every=2, unsafe_seeded_dp_randomness=True)
    out = str(tmp_path / f'data{data_seed}')
    summary, weights = trusted_setting.run_configuration(
        other, trusted_setting.Configuration('fedhdp'), choices, settings,
        out, progress=False)
    with open(os.path.join(out, 'fedhdp', 'rounds.csv')) as f:
      rows = list(csv.DictReader(f))
    released.append((
        [g['ratio'] for g in summary['groups']],
        [[r[c] for c in r if c.startswith(('weight_', 'count_opt'))]
         for r in rows], weights.trainable))
  (ratios, columns, model), (ratios1, columns1, model1) = released
  assert ratios == ratios1 and 0 < ratios[0] < ratios[1] < ratios[2] == 1.0
  assert columns == columns1 and len(columns[0]) == 4
  assert any(not np.allclose(a, b) for a, b in zip(model, model1))


def test_a_fixed_clip_norm_withholds_the_exact_clipped_fraction(task, tmp_path):
  _, rows, tags = _run(task, str(tmp_path), clip_lr=0.0)
  assert 'fraction_clipped_estimate' not in set(rows[0]) | tags
  fedhdp = algorithms.record('fedhdp', algorithms.TRUSTED).measurements
  groups = [pg.PrivacyGroup('p', 1.0, 1e-5), pg.PrivacyGroup('o')]
  withheld = release_policy.withheld_columns(groups, True, fedhdp)
  assert withheld >= {'count_p', 'num_clients', 'train_loss', 'acc_g_p',
                      'acc_l_p'}
  # The opt-out group's count, weights, noise and the noisy estimate are
  # covered; with a fixed norm the clipped fraction is exact, withheld.
  assert not withheld & {'count_o', 'weight_p', 'noise_std_p', 'clip_norm',
                         'fraction_clipped_estimate'}
  assert 'fraction_clipped_estimate' in release_policy.withheld_columns(
      groups, False, fedhdp)


def test_unprotected_statistics_need_the_flag_and_are_announced(task,
                                                                tmp_path):
  summary, rows, tags = _run(task, str(tmp_path),
                             release_unprotected_stats=True)
  assert NOT_COVERED - {'train_accuracy'} <= set(rows[0])
  assert {'count_p', 'num_clients', 'train_loss'} <= tags
  assert 'acc_g_p' in summary['metrics']
  assert summary['privacy_warnings'] == [release_policy.UNPROTECTED_WARNING]


def test_realized_denominators_report_no_epsilon(task, tmp_path):
  summary, rows, tags = _run(task, str(tmp_path), denominator='realized')
  assert not summary['privacy_accounted']
  assert summary['groups'][0]['epsilon_spent'] is None
  assert all(r['epsilon_p'] == '' for r in rows)
  assert 'epsilon_p' not in tags
  assert summary['privacy_warnings'] == [release_policy.REALIZED_WARNING]
  _, table = tables.results_table([summary])
  assert 'p: not accounted (realized denominator)' in table[0][-3]
  assert table[0][-2] == 'poisson, realized'


def test_realized_denominators_depend_on_a_zero_update_client():
  """Why realized mode is not accounted: one more private client whose
  update is exactly zero rescales the group's mean (6 clients -> 7)."""
  factory = heterogeneous_dp.HeterogeneousDPFactory(
      [0.0], [1.0], [None], initial_clip_norm=100.0, clip_learning_rate=0.0)
  process = factory.create(tff.TensorType(np.float32, [1]),
                           tff.TensorType(np.float32, [1]))
  ones = [[1.0]] * 6
  state = process.initialize()
  six = process.next(state, ones, [[1.0]] * 6).result
  seven = process.next(state, ones + [[0.0]], [[1.0]] * 7).result
  assert seven[0] == pytest.approx(six[0] * 6 / 7)


# What untrusted-server and cross-silo runs may release (rounds.csv columns,
# summary.json keys, table and sweep columns), and why. Walked by name: the
# same name means the same statistic wherever it appears.
SPENT = {'epsilon_spent_max': 'the accountant on public budgets and settings',
         'epsilon_spent_min': 'as epsilon_spent_max',
         'accountant': 'which accountant bounds the epsilons: a flag',
         'epsilon_spent_rdp_max': 'RDP\'s bound on the same public settings',
         'epsilon_spent_rdp_min': 'as epsilon_spent_rdp_max'}
UNTRUSTED_RELEASED = {
    'round': 'public',
    'acc_g': 'the DP model on the server test set (evaluation data)',
    'max_epsilon_spent': 'as epsilon_spent_max',
    'weights_frozen': 'a flag (--rpca_freeze_after_round) and the round',
    'rpca_converged': 'RPCA on the DP-SGD updates: post-processing',
    'rpca_iterations': 'as rpca_converged',
    'num_public': "PFA's mixture on the DP-SGD updates' norms",
    'num_private': 'as num_public',
    'mixture_converged': 'as num_public',
    'mixture_iterations': 'as num_public',
    **{k: PUBLIC for k in ('configuration', 'task', 'rounds',
                           'epsilon_distribution', 'settings')},
    **EVERY_SUMMARY, **SPENT,
    'target_epsilons': 'the clients\' epsilons, public (README)',
    'batch_sizes': 'public, as the epsilons',
    'pld_discretizations': 'chosen from public budgets and settings',
    'metrics': 'its keys are checked too',
    # results.md and results.csv
    'Aggregation': 'a flag', 'algorithm': 'a flag', 'Acc_g': 'as acc_g',
    'eps spent per client (min - max)': 'as epsilon_spent_max',
}
UNTRUSTED_NOT_COVERED = set(release_policy.UNTRUSTED_UNPROTECTED_METRICS) | {
    'delta_g', 'acc_g_np', 'var_g_np'}
# Each silo's summary entry.
SILO = {'silo': 'its name', 'examples': 'a dataset size',
        'target_epsilon': PUBLIC, 'delta': PUBLIC,
        'noise_multiplier': 'calibrated from public settings',
        'sampling_rate': PUBLIC, 'epochs_per_round': PUBLIC,
        'selection_epsilon': PUBLIC, 'selection_rounds': PUBLIC,
        'epsilon_spent': 'as epsilon_spent_max',
        'pld_discretization': 'chosen from public budgets and settings',
        'epsilon_spent_rdp': 'as epsilon_spent_rdp_max',
        # --silo_noise_aware_lambdas: read from the public plan above
        'lambda': 'from z_k, q_k, steps, n_k, d and --heterogeneity'}
SILO_METRIC = ("the silos' DP models scored on their test splits, declared "
               'evaluation data: post-processing for every training example')
CROSS_SILO_RELEASED = {
    'round': 'public',
    'metric': SILO_METRIC,
    'num_non_finite_updates': 'a test on the noisy DP-SGD updates',
    'cluster_0_silos': "IFCA's private selections (accounted)",
    'cluster_1_silos': 'as cluster_0_silos',
    **{k: PUBLIC for k in ('configuration', 'method', 'task', 'metric_name',
                           'settings')},
    **EVERY_SUMMARY, **SPENT,
    'silos': 'its keys are checked against SILO',
    # silos at several epsilons: the metric over each epsilon's silos
    'metric_by_epsilon': SILO_METRIC, 'metric_worst_epsilon': SILO_METRIC,
    'final_clusters': 'as cluster_0_silos',
    # results.md, results.csv and sweep_<algorithm>.csv
    'Method': 'a flag', 'lambda': 'a flag', 'learning rate': 'a flag',
    'learning_rate': 'a flag', 'runs': 'the flags\' grid',
    'accuracy (%), test-weighted': SILO_METRIC, 'accuracy': SILO_METRIC,
    'eps spent per silo (min - max)': 'as epsilon_spent_max',
}


def _cli(out, *flags):
  result = repository.run_program(  # what the run writes: in this process
      'run_experiment.py', '--task=digits', '--rounds=1', '--eval_every=1',
      '--deltas=1e-3', '--checkpoint_every=0', *flags, f'--output_dir={out}')
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout


def _released_names(out):
  """Every name a run folder releases, by file, and the files written."""
  files = sorted(os.path.relpath(os.path.join(d, f), out)
                 for d, _, names in os.walk(out) for f in names)
  names = {}
  for rel in files:
    path = os.path.join(out, rel)
    if rel.endswith('.csv'):
      with open(path, newline='') as f:
        names[rel] = set(next(csv.reader(f)))
    elif rel.endswith('summary.json'):
      with open(path) as f:
        names[rel] = json.load(f)
    elif rel == 'results.md':
      with open(path) as f:
        header = next(line for line in f if line.startswith('| '))
      names[rel] = {c.strip() for c in header.strip().strip('|').split('|')}
  return files, names


def _check_walk(out, released, not_covered):
  files, names = _released_names(out)
  summaries = {}
  for rel, value in names.items():
    if isinstance(value, dict):  # a summary: its keys, then its metrics
      summaries[rel] = value
      value = set(value) | set(value.get('metrics', {}))
    assert value <= set(released), (rel, value - set(released))
    assert not value & not_covered, (rel, value & not_covered)
  return files, summaries


@pytest.fixture(scope='module')
def untrusted_run(tmp_path_factory):
  out = str(tmp_path_factory.mktemp('untrusted'))
  # Ten clients: what is released is named the same for any number, and
  # each client's DP-SGD plan is calibrated on its own.
  stdout = _cli(out, '--algorithms=robust_hdp,pfa', '--num_clients=10',
                '--epsilon_distribution=uniform')
  return out, stdout


def test_an_untrusted_run_releases_only_what_epsilon_covers(untrusted_run):
  out, stdout = untrusted_run
  files, summaries = _check_walk(out, UNTRUSTED_RELEASED,
                                 UNTRUSTED_NOT_COVERED)
  assert set(files) == {'results.md', 'results.csv', '.run.lock'} | {
      f'{a}/{f}' for a in ('robust_hdp', 'pfa')
      for f in ('rounds.csv', 'summary.json',  # no TensorBoard events
                'final_model.npz',  # the DP model, as a trusted run's
                # the folder's lock and its private state (no release)
                '.run.lock', 'checkpoints/run_key.json',
                'checkpoints/dp_secret_seed')}
  # The command line's accountant, the PLD (without a stated discretization).
  fields = set(untrusted_setting.UntrustedSettings(
      rounds=1, accountant='pld').as_dict())
  assert 'rpca_freeze_after_round' in fields  # the rules' options, flat
  for summary in summaries.values():
    assert set(summary['metrics']) == {'acc_g'}
    assert set(summary['settings']) == fields
    assert summary['privacy_warnings'] == []
  assert release_policy.UNPROTECTED_WARNING not in stdout
  for a in ('robust_hdp', 'pfa'):  # the trained model, as README says
    with np.load(os.path.join(out, a, 'final_model.npz')) as model:
      assert 'trainable_0' in model and np.isfinite(model['trainable_0']).all()
  # results.md opens with the line the terminal printed: what was run.
  with open(os.path.join(out, 'results.md')) as f:
    heading = f.readline().rstrip('\n')
  assert heading.startswith('digits: ') and heading in stdout.splitlines()


def test_untrusted_local_test_metrics_need_the_flag_and_are_announced(
    tmp_path):
  stdout = _cli(str(tmp_path), '--algorithms=weiavg', '--num_clients=10',
                '--release_unprotected_stats')
  assert release_policy.UNPROTECTED_WARNING in stdout
  with open(tmp_path / 'weiavg' / 'summary.json') as f:
    summary = json.load(f)
  assert summary['privacy_warnings'] == [release_policy.UNPROTECTED_WARNING]
  with open(tmp_path / 'weiavg' / 'rounds.csv', newline='') as f:
    (row,) = list(csv.DictReader(f))
  # Exact averages over every client's local test split: what was withheld.
  for name in release_policy.UNTRUSTED_UNPROTECTED_METRICS:
    assert float(row[name]) == pytest.approx(summary['metrics'][name],
                                             rel=1e-5)


def test_a_cross_silo_run_releases_only_what_epsilon_covers(tmp_path):
  # A batch size above every silo's size: q = 1, so calibration is quick.
  stdout = _cli(str(tmp_path), '--algorithms=ifca', '--num_clients=10',
                '--epsilons=4', '--batch_size=500', '--num_clusters=2')
  files, summaries = _check_walk(str(tmp_path), CROSS_SILO_RELEASED, set())
  assert set(files) == {
      'results.md', 'results.csv', 'sweep_ifca.csv', '.run.lock',
      cross_silo_setting.CALIBRATIONS_FILE,  # z per public plan parameters
      'ifca_lr0.1/rounds.csv', 'ifca_lr0.1/summary.json',
      # the run's private state (no release), and its folder's lock
      'ifca_lr0.1/checkpoints/run_key.json',
      'ifca_lr0.1/checkpoints/dp_secret_seed', 'ifca_lr0.1/.run.lock'}
  (summary,) = summaries.values()
  assert {k for s in summary['silos'] for k in s} <= set(SILO)
  # Every setting, but the per-epsilon and noise-aware lambdas' this run
  # did not ask for.
  assert set(summary['settings']) == {f.name for f in dataclasses.fields(
      cross_silo_setting.CrossSiloSettings)} - {
          'epsilon_lambdas', 'noise_aware_lambdas', 'heterogeneity'}
  assert summary['privacy_warnings'] == []
  assert 'WARNING' not in stdout


def test_each_levels_personal_accuracy_is_released_only_with_the_flag(
    task, tmp_path):
  """Ditto over two private levels: each level's personalized accuracy and
  the worst level's are statistics of private clients' own data, withheld
  from rounds.csv and summary.json by default and, with
  --release_unprotected_stats, the means of the clients' scores by level."""
  levels = [pg.PrivacyGroup('private_eps2', 2.0, 1e-2),
            pg.PrivacyGroup('private_eps8', 8.0, 1e-2)]
  choices = trusted_setting.client_choices(task, levels, 0.2, seed=0)
  released = []
  for unprotected in (False, True):
    settings = trusted_setting.Settings(
        rounds=2, sampling=accounting.PoissonSampling(0.5),
        clip=plans.ClipSettings(initial_norm=0.5, count_stddev=5.0),
        eval_every=2, unsafe_seeded_dp_randomness=True,
        release_unprotected_stats=unprotected,
        ditto=trusted_setting.DittoSettings(
            None, 0.1, 0.1, {'private_eps2': 1.0, 'private_eps8': 0.2}))
    out = str(tmp_path / str(unprotected))
    summary, _ = trusted_setting.run_configuration(
        task, trusted_setting.Configuration('fedhdp', 0.5), choices,
        settings, out, progress=False)
    with open(os.path.join(out, 'fedhdp_r0.5', 'rounds.csv')) as f:
      columns = set(next(csv.reader(f)))
    released.append((summary, columns))
  (default, default_columns), (flagged, flagged_columns) = released
  level_keys = {'acc_l_level_private_eps2', 'acc_l_level_private_eps8',
                'acc_l_worst_level'}
  assert not level_keys & (default_columns | set(default['metrics']))
  assert level_keys <= flagged_columns & set(flagged['metrics'])
  m = flagged['metrics']
  assert m['acc_l_worst_level'] == min(m['acc_l_level_private_eps2'],
                                       m['acc_l_level_private_eps8'])
  sizes = choices.group_sizes()
  # Every private client is scored: the levels' means weigh up to Acc_l,p.
  assert m['acc_l_p'] == pytest.approx(
      (sizes[0] * m['acc_l_level_private_eps2'] +
       sizes[1] * m['acc_l_level_private_eps8']) / (sizes[0] + sizes[1]))
  assert flagged['ditto']['group_lambdas'] == {
      'private_eps2': 1.0, 'private_eps8': 0.2, 'opt_out': 0.1}
