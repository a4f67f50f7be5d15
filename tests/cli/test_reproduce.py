"""reproduce.py end to end on the digits preset, its skip/resume, the presets."""

import contextlib
import csv
import glob
import json
import os
import sys

import matplotlib
matplotlib.use('Agg')
from matplotlib import image  # noqa: E402
import numpy as np  # noqa: E402
from absl import flags as absl_flags  # noqa: E402
from absl.testing import flagsaver  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from tff_hdp import tasks  # noqa: E402
from tff_hdp.privacy import accounting  # noqa: E402
from tff_hdp.simulation import checkpointing  # noqa: E402
from tff_hdp.simulation import folder_lock  # noqa: E402
from tff_hdp.simulation import untrusted_setting  # noqa: E402
from tff_hdp.simulation import trusted_setting  # noqa: E402
from tff_hdp.cli import presets  # noqa: E402
from tff_hdp.cli import untrusted as cli_untrusted  # noqa: E402
from tff_hdp.reporting import tables  # noqa: E402
from tff_hdp.federated_task import TaskOptions  # noqa: E402
from tff_hdp.privacy.privacy_groups import PrivacyGroup  # noqa: E402
from tests import repository

pytestmark = pytest.mark.tf

ROOT = repository.ROOT
# Two configurations with Ditto (one lambda block), 2 rounds, every round
# evaluated: the whole pipeline in about a minute.
FLAGS = ['--presets=digits', '--rounds=2', '--eval_every=1',
         '--algorithms=dp_fedavg,fedhdp', '--r=0.5']
CONFIGS = ('dp_fedavg', 'fedhdp_r0.5')
# The tests that read the module's run (`first`, `second`): one xdist worker
# runs it.
_FIRST = pytest.mark.xdist_group('test_reproduce_first')


def _run(*flags):
  """reproduce.py in this process (what it trains, skips and writes is the
  claim; a folder another invocation holds is held here by `flock` on its
  own open file, which conflicts within one process too)."""
  return repository.run_program('reproduce.py', *flags)


@pytest.fixture(scope='module')
def first(tmp_path_factory):
  out = str(tmp_path_factory.mktemp('reproduce'))
  result = _run(*FLAGS, f'--output_dir={out}')
  assert result.returncode == 0, result.stderr[-3000:]
  return out, result


@pytest.fixture(scope='module')
def second(first):
  """Re-runs after deleting one configuration's summary (an unfinished run)."""
  out, _ = first
  block = os.path.join(out, 'digits', 'lambda0.05')
  kept = {f: os.stat(os.path.join(block, 'dp_fedavg', f)).st_mtime_ns
          for f in ('summary.json', 'rounds.csv')}
  os.remove(os.path.join(block, 'fedhdp_r0.5', 'summary.json'))
  result = _run(*FLAGS, f'--output_dir={out}')
  assert result.returncode == 0, result.stderr[-3000:]
  return out, result, kept


def _block(out, config=''):
  return os.path.join(out, 'digits', 'lambda0.05', config)


def _summary(out, config):
  with open(os.path.join(_block(out, config), 'summary.json')) as f:
    return json.load(f)


def _rounds(out, config):
  with open(os.path.join(_block(out, config), 'rounds.csv')) as f:
    return list(csv.DictReader(f))


def _markdown_rows(text):
  return [[c.strip() for c in line.strip().strip('|').split('|')]
          for line in text.splitlines() if line.startswith('| ')]


@_FIRST
def test_table_has_the_papers_layout_and_variance_scale(first):
  out, result = first
  with open(os.path.join(out, 'digits', 'results.md')) as f:
    text = f.read()
  rows = _markdown_rows(text)
  assert rows[0][:3] == ['Algorithm', 'hyperparameters', 'Acc_g']
  assert 'Acc_l,np' in rows[0]
  # The bundled digits task is in no paper: nothing published to compare.
  assert rows[0][-1] == 'published Acc_g'
  assert [r[-1] for r in rows[1:]] == ['-', '-']
  assert [r[:2] for r in rows[1:]] == [
      ['DP-FedAvg', 'lambda_p=0.05'],
      ['FedHDP', 'r=0.5, lambda_p=lambda_np=0.05']]
  col = rows[0].index('Acc_g,np')
  with open(os.path.join(out, 'digits', 'results.csv'), newline='') as f:
    records = list(csv.DictReader(f))
  for row, record, config in zip(rows[1:], records, CONFIGS):
    m = _summary(out, config)['metrics']
    assert row[col] == f"{m['acc_g_np']:.2f} ({m['var_g_np'] / 100:.3g})"
    # results.csv: the same numbers, unscaled, one column each.
    assert record['configuration'] == config
    assert float(record['acc_g_np']) == m['acc_g_np']
    assert float(record['var_g_np']) == m['var_g_np']
    assert record['published_acc_g_min'] == ''
    # Private clients' metrics are withheld by default.
    assert row[rows[0].index('Acc_g,p')] == '-' and 'acc_g_p' not in m
    assert record['acc_g_p'] == ''
  assert tables.VARIANCE_NOTE in text and tables.WITHHELD_NOTE in text
  assert '| FedHDP' in text and '| FedHDP' in result.stdout
  assert '2 rounds, 5 clients per round' in text  # the overrides took effect


@_FIRST
def test_every_configuration_ran_the_requested_rounds(first):
  out, _ = first
  for config in CONFIGS:
    summary = _summary(out, config)
    assert summary['rounds'] == 2 and summary['ditto']['lambda_p'] == 0.05
    assert [r['round'] for r in _rounds(out, config)] == ['1', '2']


@_FIRST
def test_plots_are_written(first):
  out, _ = first
  for name in ('accuracy_vs_rounds', 'epsilon_vs_rounds', 'accuracy_vs_r'):
    path = os.path.join(out, 'digits', 'plots', f'lambda0.05_{name}.png')
    assert image.imread(path).shape[0] > 100, path


def _scalars(run_dir):
  values = {}
  for path in glob.glob(os.path.join(run_dir, 'tensorboard', '*tfevents*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      for v in event.summary.value:
        values[(v.tag, event.step)] = float(tf.make_ndarray(v.tensor))
  return values


@_FIRST
def test_tensorboard_events_hold_each_rounds_row(first):
  out, _ = first
  for config in CONFIGS:
    scalars = _scalars(_block(out, config))
    for row in _rounds(out, config):
      step = int(row['round'])
      for tag in ('acc_g', 'clip_norm', 'acc_l_np'):
        np.testing.assert_allclose(scalars[(tag, step)], float(row[tag]),
                                   rtol=1e-5)
    # The opt-out group's infinite epsilon is not released, nor are
    # statistics of private clients.
    tags = {tag for tag, _ in scalars}
    assert not tags & {'epsilon_opt_out', 'acc_l_p', 'train_loss',
                       'num_clients', 'count_private_eps3.6', 'count_all_private'}
  assert ('epsilon_private_eps3.6', 2) in _scalars(_block(out, 'fedhdp_r0.5'))


@_FIRST
def test_rerun_skips_finished_configurations_only(second):
  out, result, kept = second
  assert 'digits/lambda0.05/dp_fedavg: finished earlier, skipped' in (
      result.stdout)
  assert 'fedhdp_r0.5: finished earlier' not in result.stdout
  for name, mtime in kept.items():
    assert os.stat(os.path.join(_block(out, 'dp_fedavg'), name)).st_mtime_ns \
        == mtime, name
  # The unfinished one resumed from its final checkpoint: same rows, summary
  # written again, and the table still lists both.
  assert _summary(out, 'fedhdp_r0.5')['rounds'] == 2
  assert [r['round'] for r in _rounds(out, 'fedhdp_r0.5')] == ['1', '2']
  with open(os.path.join(out, 'digits', 'results.csv')) as f:
    assert len(list(csv.reader(f))) == 3


@_FIRST
def test_a_configuration_another_process_holds_is_left_to_it(second):
  """Two invocations of one command share the work: a configuration whose
  folder another live process holds is skipped, not trained twice nor an
  error, and the next invocation picks it up."""
  out, _, _ = second
  held = _block(out, 'dp_fedavg')
  os.remove(os.path.join(held, 'summary.json'))  # unfinished
  rows_mtime = os.stat(os.path.join(held, 'rounds.csv')).st_mtime_ns
  # As another invocation of the command would: the run and the output folder.
  with folder_lock.exclusive(out), folder_lock.exclusive(held):
    result = _run(*FLAGS, f'--output_dir={out}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert (f'digits/lambda0.05/dp_fedavg: running in process {os.getpid()}, '
          'skipped here') in result.stdout
  assert ('Running in other processes, not in the table: '
          'digits/lambda0.05/dp_fedavg. Re-run this command') in result.stdout
  assert os.stat(os.path.join(held, 'rounds.csv')).st_mtime_ns == rows_mtime
  assert not os.path.exists(os.path.join(held, 'summary.json'))
  with open(os.path.join(out, 'digits', 'results.csv')) as f:
    assert [r['configuration'] for r in csv.DictReader(f)] == ['fedhdp_r0.5']
  result = _run(*FLAGS, f'--output_dir={out}')  # released: resumed here
  assert result.returncode == 0, result.stderr[-3000:]
  assert _summary(out, 'dp_fedavg')['rounds'] == 2
  with open(os.path.join(out, 'digits', 'results.csv')) as f:
    assert len(list(csv.reader(f))) == 3


def _set_figure_flags(rounds: int, *extra: str) -> None:
  """Flags of a small WeiAvg figure on generated digits (inside flagsaver)."""
  absl_flags.FLAGS([
      'reproduce.py', '--task=digits', '--num_clients=20', f'--rounds={rounds}',
      '--algorithms=weiavg', '--deltas=1e-4', '--eval_every=1',
      '--epsilon_distribution=dist1', *extra])


def test_a_figure_waits_for_selection_runs_another_process_holds(
    tmp_path, capsys, monkeypatch):
  """Every distribution's runs need the choice: the free selection runs are
  trained here, then the held one is waited for (here: released during the
  wait, so this process trains it)."""
  figure = presets.FigurePreset(
      'A figure', 'digits', 20, ('dist1',), ('weiavg',), 1, 3.0, 1e-4,
      (0.03, 0.3), 1, 'nowhere')
  held = str(tmp_path / 'lr_selection' / 'lr0.03' / 'weiavg')
  waits = []
  with contextlib.ExitStack() as holder:
    holder.enter_context(folder_lock.exclusive(held))

    def release():
      waits.append(os.path.exists(tmp_path / 'lr_selection' / 'lr0.3' /
                                  'weiavg' / 'summary.json'))
      holder.close()

    monkeypatch.setattr(cli_untrusted, '_wait_for_holders', release)
    with flagsaver.flagsaver():
      _set_figure_flags(1)
      cli_untrusted.run_figure(figure, str(tmp_path))
  out = capsys.readouterr().out
  assert f'{held}: running in process {os.getpid()}, skipped here' in out
  assert 'Waiting for 1 learning-rate selection run(s) other processes hold' in (
      out)
  assert waits == [True]  # the free run was trained before waiting
  assert os.path.exists(os.path.join(held, 'summary.json'))
  assert len(list(tmp_path.glob('seed0/dist1/lr0.*3/weiavg/summary.json'))) == 1


def test_a_figure_tables_what_finished_and_leaves_held_runs_to_their_holder(
    tmp_path, capsys):
  figure = presets.FigurePreset(
      'A figure', 'digits', 20, ('dist9', 'dist1'), ('weiavg',), 1, 3.0, 1e-4,
      (0.1,), 1, 'nowhere')
  held = str(tmp_path / 'seed0' / 'dist1' / 'lr0.1' / 'weiavg')
  with flagsaver.flagsaver():
    _set_figure_flags(1, '--client_lr=0.1')
    with folder_lock.exclusive(held):
      cli_untrusted.run_figure(figure, str(tmp_path))
    out = capsys.readouterr().out
    assert f'{held}: running in process {os.getpid()}, skipped here' in out
    assert 'Running in other processes: seed0/dist1/weiavg. Re-run' in out
    with open(tmp_path / 'results.csv') as f:
      first = list(csv.DictReader(f))
    assert [(r['distribution'], r['acc_g_weiavg'] == '') for r in first] == [
        ('dist1', True), ('dist9', False)]
    assert '| dist1        | 0    | running elsewhere |' in (
        tmp_path / 'results.md').read_text()
    assert sorted(os.listdir(tmp_path / 'plots')) == [
        'accuracy_by_distribution.png', 'dist9_accuracy_vs_rounds.png']
    cli_untrusted.run_figure(figure, str(tmp_path))  # released: run here
  out = capsys.readouterr().out
  assert 'dist9/lr0.1/weiavg: finished earlier, skipped' in out
  assert 'Running in other processes' not in out
  with open(tmp_path / 'results.csv') as f:
    rows = list(csv.DictReader(f))
  assert rows[1] == first[1]
  assert sorted(os.listdir(tmp_path / 'plots')) == [
      'accuracy_by_distribution.png', 'dist1_accuracy_vs_rounds.png',
      'dist9_accuracy_vs_rounds.png']
  for row, dist in zip(rows, ('dist1', 'dist9')):
    with open(tmp_path / 'seed0' / dist / 'lr0.1' / 'weiavg' /
              'summary.json') as f:
      summary = json.load(f)
    assert row == {'distribution': dist, 'seed': '0',
                   'acc_g_weiavg': str(summary['metrics']['acc_g']),
                   'learning_rate_weiavg': '0.1',
                   'seconds_weiavg': str(round(summary['seconds']))}


def test_a_figure_chooses_rates_on_the_first_rounds_of_whole_runs(tmp_path):
  """The selection runs are the figure's runs stopped early, at the noise of
  all their rounds: a run calibrated for fewer rounds adds less noise."""
  figure = presets.FigurePreset(
      'A figure', 'digits', 20, ('dist1',), ('weiavg',), 3, 3.0, 1e-4,
      (0.03, 0.3), 1, 'nowhere')
  with flagsaver.flagsaver():
    _set_figure_flags(3)
    cli_untrusted.run_figure(figure, str(tmp_path))
  accs = {}
  for lr in ('0.03', '0.3'):
    with open(tmp_path / 'lr_selection' / f'lr{lr}' / 'weiavg' /
              'summary.json') as f:
      summary = json.load(f)
    assert summary['rounds'] == 1
    assert summary['settings']['rounds'] == 3
    accs[lr] = summary['metrics']['acc_g']
  best = max(accs, key=accs.get)
  with open(tmp_path / 'seed0' / 'dist1' / f'lr{best}' / 'weiavg' /
            'summary.json') as f:
    chosen = json.load(f)
  assert chosen['rounds'] == 3
  assert chosen['settings']['learning_rate'] == float(best)
  assert (tmp_path / 'lr_selection.md').read_text().startswith(
      'Acc_g after the first 1 of 3 rounds (noise calibrated for 3) on dist1')


def test_a_recorded_choice_trains_each_seed_beside_the_others(tmp_path,
                                                               capsys):
  """A figure with a recorded choice selects nothing; each seed's runs get
  folders of their own (seed and rate in the path), and the table lists
  every seed finished in the folder."""
  figure = presets.FigurePreset(
      'A figure', 'digits', 20, ('dist9', 'dist1'), ('weiavg',), 1, 3.0, 1e-4,
      (0.03, 0.3), 1, 'nowhere', chosen_learning_rates=(('weiavg', 0.3),))
  with flagsaver.flagsaver():
    _set_figure_flags(1)
    cli_untrusted.run_figure(figure, str(tmp_path), ['dist1'])
  with flagsaver.flagsaver():
    _set_figure_flags(1, '--seed=1')
    cli_untrusted.run_figure(figure, str(tmp_path), ['dist1'])
  out = capsys.readouterr().out
  assert 'weiavg 0.3 (the recorded selection)' in out
  assert not (tmp_path / 'lr_selection').exists()
  assert not (tmp_path / 'seed0' / 'dist9').exists()
  with open(tmp_path / 'results.csv') as f:
    rows = list(csv.DictReader(f))
  assert [(r['distribution'], r['seed']) for r in rows] == [
      ('dist1', '0'), ('dist1', '1')]
  for row in rows:
    with open(tmp_path / f"seed{row['seed']}" / 'dist1' / 'lr0.3' / 'weiavg' /
              'summary.json') as f:
      summary = json.load(f)
    assert summary['settings']['seed'] == int(row['seed'])
    assert row['acc_g_weiavg'] == str(summary['metrics']['acc_g'])
  assert sorted(os.listdir(tmp_path / 'plots')) == [
      'accuracy_by_distribution.png', 'dist1_accuracy_vs_rounds.png',
      'seed1_dist1_accuracy_vs_rounds.png']


@pytest.mark.parametrize('flags,message', [
    (['--presets=cifar'], "--presets: unknown preset 'cifar'"),
    (['--presets=digits', '--ditto_lambdas=-1'],
     '--ditto_lambdas must be in [0, 1e+38], got -1.0.'),
    (['--presets=robust_hdp_fig2', '--algorithms=fedhdp'],
     "preset robust_hdp_fig2 runs untrusted-server algorithms"),
    (['--presets=robust_hdp_fig2', '--ditto_lambdas=0.1'],
     '--ditto_lambdas does not apply to preset robust_hdp_fig2'),
    (['--presets=robust_hdp_fig2', '--epsilon_distribution=dist3'],
     '--epsilon_distribution: preset robust_hdp_fig2 runs each of dist1,'),
    (['--presets=robust_hdp_fig2', '--distributions=dist1,dist10'],
     "--distributions: preset robust_hdp_fig2 has no 'dist10'"),
    (['--presets=robust_hdp_fig2', '--distributions=dist2,dist2'],
     '--distributions'),
    (['--presets=digits', '--distributions=dist2'],
     '--distributions applies to figure presets (robust_hdp_fig2), not '
     'digits'),
    (['--presets=robust_hdp_fig2', '--r=0.1'],
     '--r does not apply to untrusted-server runs'),
])
def test_bad_input_is_one_clear_line(flags, message, tmp_path):
  result = _run(*flags, f'--output_dir={tmp_path}')
  assert result.returncode != 0
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith('reproduce.py: error: ') and message in last


def _digits_setup(rounds):
  task = tasks.load('digits', TaskOptions(num_clients=20, batch_size=10))
  choices = trusted_setting.client_choices(
      task, [PrivacyGroup('private_eps3.6', 3.6, 1e-4)], 0.05, 0)
  settings = trusted_setting.Settings(rounds=rounds,
                                 sampling=accounting.PoissonSampling(0.25))
  return task, choices, settings


def test_completed_summary_needs_the_same_run(tmp_path):
  task, choices, settings = _digits_setup(rounds=3)
  config = trusted_setting.Configuration('fedhdp', 0.5)
  out = str(tmp_path)
  assert trusted_setting.completed_summary(task, config, choices, settings,
                                      out) is None
  run_dir = tmp_path / config.name
  run_dir.mkdir()
  summary = {'configuration': config.name, 'task': 'digits', 'rounds': 3,
             'metrics': {'acc_g': 50.0}}
  (run_dir / 'summary.json').write_text(json.dumps(summary))
  # No run key beside it: nothing says it is a summary of this run.
  assert trusted_setting.completed_summary(task, config, choices, settings,
                                      out) is None
  checkpointing.RunCheckpoint(
      str(run_dir / 'checkpoints'),
      trusted_setting.run_key(task, config, choices, settings)).save(
          [np.zeros(1, np.float32)], 3)
  assert trusted_setting.completed_summary(task, config, choices, settings,
                                      out) == summary
  (run_dir / 'summary.json').write_text(json.dumps(dict(summary, rounds=2)))
  assert trusted_setting.completed_summary(task, config, choices, settings,
                                      out) is None
  (run_dir / 'summary.json').write_text('{"configuration": "fedhdp_r0.5", ')
  assert trusted_setting.completed_summary(task, config, choices, settings,
                                      out) is None
  # A checkpoint of another run beside a complete summary is an error.
  (run_dir / 'summary.json').write_text(json.dumps(summary))
  checkpointing.RunCheckpoint(str(run_dir / 'checkpoints'), {'other': 1}).save(
      [np.zeros(1, np.float32)], 4)
  with pytest.raises(checkpointing.CheckpointError, match='different run'):
    trusted_setting.completed_summary(task, config, choices, settings, out)


# (clients, fraction per round, epsilon, r of the FedHDP Tables 1-2 rows).
PUBLISHED = {
    'mnist_noniid': (2000, 0.05, 3.6, {0.01, 1}),
    'mnist_noniid_skewed': (2000, 0.05, 3.6, {0.1, 0.9, 1}),
    'fmnist': (3383, 0.03, 0.6, {0.01, 1}),
    'femnist': (3400, 0.03, 4.1, {0.01, 0.1, 1}),
}


@pytest.mark.parametrize('name', presets.PAPER_PRESETS)
def test_paper_presets_have_published_settings_and_feasible_budgets(name):
  preset = presets.PRESETS[name]
  clients, fraction, epsilon, ratios = PUBLISHED[name]
  assert (preset.fraction_per_round, preset.epsilon) == (fraction, epsilon)
  assert (preset.rounds, preset.delta, preset.opt_out_fraction) == (
      500, 1e-4, 0.05)
  assert ratios.issubset(preset.ratios)
  assert preset.algorithms == ('nonprivate', 'dp_fedavg', 'fedhdp')
  assert preset.flag_values()['task'] == name
  # The default clip-count noise (5% of the expected clients per round) must
  # leave room for the published target over 500 rounds.
  per_round = round(fraction * clients)
  z = accounting.calibrate_noise_multiplier(
      epsilon, preset.delta, accounting.PoissonSampling(per_round / clients),
      preset.rounds, 0.05 * per_round)
  assert z > 0
