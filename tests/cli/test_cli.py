"""run_experiment.py end to end, and its one-line errors for bad input."""

import csv
import glob
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from tests import repository
from tff_hdp.privacy import accounting
from tff_hdp.privacy import plans
from tff_hdp.privacy.privacy_groups import PrivacyGroup

pytestmark = pytest.mark.tf


ROOT = repository.ROOT


def _run(*flags, cwd=ROOT):
  """run_experiment.py in this process: what a command computes and prints
  (test_ctrl_c starts its own process, whose signal is the point)."""
  return repository.run_program('run_experiment.py', *flags, cwd=cwd)


@pytest.mark.parametrize('flags,message', [
    (['--clients_per_round=5000', '--rounds=1'],
     '--clients_per_round=5000 exceeds the 100 clients of task'),
    (['--rounds=500', '--clients_per_round=10', '--epsilons=0.5',
      '--clip_count_stddev=0.5'], 'cannot be met'),
    (['--task=mnist_noniid', '--data_dir={tmp}/nowhere'],
     'nowhere does not exist; it must be a folder holding mnist.npz'),
    (['--task=mnist_noniid', '--data_dir={tmp}/bad'],
     'bad/mnist.npz as an .npz archive'),
    (['--algorithms=local', '--task=vehicle', '--data_dir={vehicle}',
      '--deltas=0.5'], '--deltas=0.5 must be below n_k^-1.1 for every silo'),
    (['--algorithms=ifca', '--task=school', '--data_dir={school}',
      '--deltas=1e-3'], 'selects clusters by error rate'),
    # delta >= 1/N: digits has 95 private clients by default.
    (['--deltas=0.02', '--rounds=1'],
     "--deltas=0.02 must be below 1/N = 0.0105 for privacy group "
     "'private_eps3.6' (95 clients)"),
    (['--algorithms=weiavg', '--num_clients=10', '--deltas=0.01',
      '--rounds=1'], '--deltas=0.01 must be below 1/n = '),
    # Bad contents of a well-formed file.
    (['--task=mnist_noniid', '--data_dir={tmp}/labels99'],
     'labels99: 1 labels outside the classes 0-9 (e.g. 99)'),
    (['--task=mnist_iid', '--data_dir={tmp}/labels99'],
     'labels99: 1 labels outside the classes 0-9 (e.g. 99)'),
    # Fractions that leave a private level without clients on this task.
    (['--epsilons=1,2', '--level_fractions=0.995,0.005', '--rounds=1'],
     "--level_fractions leave privacy level 'private_eps2' without clients"),
    (['--opt_out_fraction=0.999', '--rounds=1'],
     "--opt_out_fraction=0.999 and --level_fractions leave privacy level"),
    # 0.001 of 100 clients rounds to no opt-out client: every weight 0.
    (['--level_ratios=0', '--opt_out_fraction=0.001', '--rounds=1'],
     '--level_ratios=0 with --opt_out_fraction=0.001 weighs every group'),
    # No advice to pass --data_dir to a task that makes its own data.
    (['--num_clients=15'], '--num_clients must be a multiple of 10, got 15.'),
])
def test_bad_input_found_with_the_data_is_one_clear_line(flags, message,
                                                         tmp_path):
  os.makedirs(tmp_path / 'bad')
  (tmp_path / 'bad' / 'mnist.npz').write_text('not an archive')
  os.makedirs(tmp_path / 'labels99')
  images = np.zeros((20, 28, 28), np.uint8)
  np.savez(tmp_path / 'labels99' / 'mnist.npz', x_train=images,
           y_train=np.array([99] + [1] * 19), x_test=images[:2],
           y_test=np.array([1, 2]))
  for task in ('vehicle', 'school'):
    if any(f'{{{task}}}' in f for f in flags):
      flags = [f.replace(f'{{{task}}}', repository.task_data(task))
               for f in flags]
  flags = [f.replace('{tmp}', str(tmp_path)) for f in flags]
  result = _run(*flags, f'--output_dir={tmp_path}/out')
  assert result.returncode == 2
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith('run_experiment.py: error: ')
  assert message in last, last
  if '--num_clients=15' in flags:  # digits reads no data: no --data_dir advice
    assert last.endswith(message), last
  assert 'Traceback' not in result.stderr
  # The folder the command created goes with it (it held only .run.lock).
  assert not os.path.exists(tmp_path / 'out')


def test_a_refused_run_keeps_a_folder_it_did_not_create(tmp_path):
  (tmp_path / 'mine').mkdir()
  result = _run('--clients_per_round=5000', '--rounds=1',
                f'--output_dir={tmp_path}/mine')
  assert result.returncode == 2
  assert os.path.isdir(tmp_path / 'mine')


def test_no_flags_trains_the_embedded_task_and_prints_the_table(tmp_path):
  # The defaults' 5% clip-count noise (0.5 for 10 clients per round) cannot
  # meet (3.6, 1e-4) over 60 rounds: the run derives a feasible one, says so.
  result = _run(cwd=str(tmp_path))
  assert result.returncode == 0, result.stderr[-2000:]
  assert '--clip_count_stddev not given: using ' in result.stdout
  assert '| fedhdp ' in result.stdout
  # Without --output_dir: a folder named by the task and the flags, printed.
  folder = re.search(r'Files go to (results/digits-[0-9a-f]{8})/',
                     result.stdout).group(1)
  results_md = tmp_path / folder / 'results.md'
  written = results_md.read_text()
  # Another command without --output_dir gets its own folder: point
  # estimation does not overwrite the training run's table.
  other = _run('--task=point_estimation', '--trials=500', cwd=str(tmp_path))
  assert other.returncode == 0, other.stderr[-2000:]
  assert f'Files go to {folder}/' not in other.stdout
  assert re.search(r'Table: results/point_estimation-[0-9a-f]{8}/',
                   other.stdout)
  assert results_md.read_text() == written
  # The same command again finds its folder: every round is checkpointed,
  # so it resumes at the end and trains nothing.
  again = _run(cwd=str(tmp_path))
  assert again.returncode == 0, again.stderr[-2000:]
  assert f'Files go to {folder}/' in again.stdout


def test_a_given_clip_count_noise_equal_to_the_default_is_the_same_run(
    tmp_path):
  flags = ['--rounds=2', '--checkpoint_every=1', '--eval_every=2',
           f'--output_dir={tmp_path}']
  first = _run(*flags)
  assert first.returncode == 0, first.stderr[-2000:]
  printed = re.search(r'--clip_count_stddev not given: using ([0-9.e+-]+),',
                      first.stdout).group(1)
  key = (tmp_path / 'fedhdp' / 'checkpoints' / 'run_key.json').read_text()
  # The printed value, given back, resumes the finished run (same key); any
  # other value is another run and is refused.
  same = _run(*flags, f'--clip_count_stddev={printed}')
  assert same.returncode == 0, same.stderr[-2000:]
  assert (tmp_path / 'fedhdp' / 'checkpoints' /
          'run_key.json').read_text() == key
  other = _run(*flags, f'--clip_count_stddev={float(printed) * 2}')
  assert other.returncode == 2 and 'different run' in other.stderr, (
      other.stderr[-2000:])


@pytest.mark.parametrize('clients_per_round,rounds,derived', [
    (10, 60, True),  # z* of the target: 5% of 10 clients is too little
    (50, 5, False),  # TFF's 5% of the expected clients per round
])
def test_a_given_clip_count_noise_equal_to_the_default_is_the_same_folder(
    clients_per_round, rounds, derived):
  # Without --output_dir the folder is named by the flags: the default's
  # value, given, must find the same run's folder, or it trains again. The
  # default depends on the task's 100 clients, so these dry runs read them.
  value, is_derived = plans.default_clip_count_stddev(
      [PrivacyGroup('private', 3.6, 1e-4)],
      accounting.PoissonSampling(clients_per_round / 100, accounting.PLD),
      rounds, 100)
  assert is_derived == derived

  def folder(*flags):
    result = _run('--dry_run', f'--clients_per_round={clients_per_round}',
                  f'--rounds={rounds}', *flags)
    assert result.returncode == 0, result.stderr[-2000:]
    return re.search(r'files in (results/digits-[0-9a-f]{8})/',
                     result.stdout).group(1)

  default = folder()
  assert folder(f'--clip_count_stddev={value}') == default
  assert folder(f'--clip_count_stddev={value * 2}') != default


def test_ctrl_c_ends_with_one_line_saying_how_to_resume(tmp_path):
  # As from a terminal: a suite started in the background (`cmd &` in a
  # script) passes on SIGINT ignored, and Python then never raises
  # KeyboardInterrupt.
  process = subprocess.Popen(
      [sys.executable, os.path.join(ROOT, 'run_experiment.py'),
       '--rounds=1000', '--clip_count_stddev=50', f'--output_dir={tmp_path}'],
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  # Interrupt once training has started: the progress bar is on stderr.
  seen = ''
  while 'round' not in seen:
    seen += process.stderr.read(1)
    assert process.poll() is None, seen
  process.send_signal(signal.SIGINT)
  _, rest = process.communicate(timeout=120)
  stderr = seen + rest
  assert process.returncode == 130, stderr[-2000:]
  assert 'Traceback' not in stderr
  assert stderr.strip().splitlines()[-1] == (
      'run_experiment.py: interrupted; re-run the same command to resume '
      'from the last checkpoint.')


def test_each_command_in_one_process_says_its_own_notes(tmp_path):
  """Two commands run one after the other in one process (a script, these
  tests) each print the derived clip-count noise, not only the first."""
  for name in ('first', 'second'):
    result = _run('--rounds=1', '--noplots', '--notensorboard',
                  f'--output_dir={tmp_path / name}')
    assert result.returncode == 0, result.stderr[-2000:]
    assert '--clip_count_stddev not given: using ' in result.stdout, name


def test_short_comparison_prints_the_table_and_writes_files(tmp_path):
  result = _run('--algorithms=dp_fedavg,fedhdp', '--r=0.5', '--rounds=2',
                '--clients_per_round=20', '--clip_count_stddev=3',
                '--eval_every=1', f'--output_dir={tmp_path}')
  assert result.returncode == 0, result.stderr[-2000:]
  assert '| Algorithm' in result.stdout
  assert 'dp_fedavg' in result.stdout and 'fedhdp_r0.5' in result.stdout
  for name in ('results.md', 'results.csv', 'dp_fedavg/rounds.csv',
               'fedhdp_r0.5/summary.json', 'plots/accuracy_vs_rounds.png',
               'plots/epsilon_vs_rounds.png'):
    assert os.path.exists(os.path.join(tmp_path, name)), name
  assert 'Per-round metrics, summaries, TensorBoard events, plots' in (
      result.stdout)
  # The events hold rounds.csv's rows: one event of acc_g per round.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  events = tf.compat.v1.train.summary_iterator(next(iter(glob.glob(
      os.path.join(tmp_path, 'fedhdp_r0.5', 'tensorboard', 'events.*')))))
  steps = [e.step for e in events for v in e.summary.value
           if v.tag == 'acc_g']
  assert steps == [1, 2]
  with open(os.path.join(tmp_path, 'fedhdp_r0.5', 'summary.json')) as f:
    summary = json.load(f)
  assert summary['groups'][-1]['name'] == 'opt_out'
  assert summary['groups'][-1]['epsilon_spent'] is None  # no guarantee


def test_regression_table_notes_speak_of_its_metric(tmp_path):
  result = _run('--task=linear_regression', '--epsilons=1,4',
                '--opt_out_fraction=0', '--rounds=1', '--eval_every=1',
                f'--output_dir={tmp_path}')
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'variance across clients of their mse, in its units squared' in (
      result.stdout)
  assert 'accuracy' not in (tmp_path / 'results.md').read_text()


def test_point_estimation_table(tmp_path):
  result = _run('--task=point_estimation', '--trials=4000', '--r=1',
                f'--output_dir={tmp_path}')
  assert result.returncode == 0, result.stderr[-2000:]
  assert '(r*)' in result.stdout and 'sigma_s,opt^2' in result.stdout


def test_untrusted_server_rules_run_and_report_client_spend(tmp_path):
  result = _run('--num_clients=10', '--algorithms=robust_hdp,dpfedavg',
                '--rounds=2', '--eval_every=1', '--epsilon_distribution=uniform',
                f'--output_dir={tmp_path}')
  assert result.returncode == 0, result.stderr[-2000:]
  assert '| robust_hdp' in result.stdout and '| dpfedavg' in result.stdout
  assert f'Per-round metrics and summaries: {tmp_path}/' in result.stdout
  with open(os.path.join(tmp_path, 'robust_hdp', 'summary.json')) as f:
    summary = json.load(f)
  assert len(summary['target_epsilons']) == 10
  assert (summary['settings']['seed'], summary['settings']['rounds']) == (0, 2)
  # Calibrated for exactly these rounds: spent up to each client's target.
  assert summary['epsilon_spent_max'] <= max(summary['target_epsilons']) * (
      1 + 1e-6)
  assert 1.0 <= min(summary['target_epsilons'])  # Uniform(1, 10)
  # Algorithm 1 by default: RPCA in every round, and rounds.csv says so.
  rows = _rounds(tmp_path / 'robust_hdp')
  assert [r['weights_frozen'] for r in rows] == ['0', '0']
  assert all(int(r['rpca_iterations']) > 0 for r in rows)
  assert 'rpca_iterations' not in _rounds(tmp_path / 'dpfedavg')[0]


def _rounds(run_dir):
  with open(os.path.join(run_dir, 'rounds.csv')) as f:
    return list(csv.DictReader(f))


def test_robust_hdp_weights_frozen_after_round_k_as_its_authors_code(
    tmp_path):
  result = _run('--num_clients=10', '--algorithms=robust_hdp', '--rounds=3',
                '--eval_every=3', '--epsilon_distribution=uniform',
                '--rpca_freeze_after_round=2', f'--output_dir={tmp_path}')
  assert result.returncode == 0, result.stderr[-2000:]
  rows = _rounds(tmp_path / 'robust_hdp')
  assert [r['weights_frozen'] for r in rows] == ['0', '0', '1']
  assert [int(r['rpca_iterations']) > 0 for r in rows] == [True, True, False]
  with open(os.path.join(tmp_path, 'robust_hdp', 'summary.json')) as f:
    assert json.load(f)['settings']['rpca_freeze_after_round'] == 2


def test_robust_hdp_list_sets_every_clients_epsilon_and_batch_size(tmp_path):
  result = _run('--num_clients=20', '--algorithms=weiavg', '--rounds=1',
                '--eval_every=1', '--epsilon_distribution=dist8',
                f'--output_dir={tmp_path}')
  assert result.returncode == 0, result.stderr[-2000:]
  with open(os.path.join(tmp_path, 'weiavg', 'summary.json')) as f:
    summary = json.load(f)
  # SPEC.md §3's Dist8 and batch sizes, in client order; the digits task's
  # clients hold 53-60 examples, so 64 and 128 are capped at the client's.
  assert summary['target_epsilons'] == [
      0.2, 0.2, 0.19, 0.44, 0.21, 0.19, 0.19, 0.51, 0.62, 0.2, 0.2, 0.19,
      0.19, 0.2, 0.2, 0.18, 0.61, 0.17, 0.38, 0.53]
  listed = [32, 64, 16, 32, 16, 16, 16, 32, 32, 64, 32, 64, 16, 128, 16, 64,
            32, 64, 16, 16]
  for got, want in zip(summary['batch_sizes'], listed):
    assert got == want if want <= 53 else 53 <= got <= 60
  assert summary['epsilon_spent_max'] <= 0.62 * (1 + 1e-6)


def test_cross_silo_sweep_reports_best_setting_curve_and_silo_spend(tmp_path):
  result = _run('--task=vehicle',
                '--data_dir=' + repository.task_data('vehicle'),
                '--algorithms=local,mrmtl', '--lambdas=0.1,1', '--rounds=2',
                '--epsilons=1', '--deltas=1e-3', '--dp_sgd_clip=6',
                '--batch_size=64', '--eval_every=1',
                f'--output_dir={tmp_path}')
  assert result.returncode == 0, result.stderr[-2000:]
  assert '| local ' in result.stdout and '| mrmtl ' in result.stdout
  assert 'mrmtl: best accuracy (%) over learning rates, per lambda' in (
      result.stdout)
  for name in ('results.md', 'sweep_mrmtl.csv', 'mrmtl_vs_lambda.png',
               'mrmtl_lr0.1_lambda1/rounds.csv'):
    assert os.path.exists(os.path.join(tmp_path, name)), name
  with open(os.path.join(tmp_path, 'mrmtl_lr0.1_lambda1',
                         'summary.json')) as f:
    summary = json.load(f)
  assert len(summary['silos']) == 23
  # Every silo calibrated to its own budget for exactly these rounds.
  for silo in summary['silos']:
    assert 0.99 <= silo['epsilon_spent'] <= 1.0 + 1e-6
