"""Each convention the README's table "Where the papers are silent" states,
pinned: the steps of a local DP-SGD epoch, School's loss, Robust-HDP's
clip norm and delta with its epsilon lists, T rounds trained and accounted,
and where MR-MTL's pull joins DP-SGD's gradient. The other rows are pinned
where their code is tested: tests/learning/test_dp_sgd.py (both pull
placements; a client's step is plain SGD:
`test_one_full_batch_step_without_noise_matches_a_manual_loop`),
tests/privacy/test_release_policy.py (the untrusted setting's Acc_g,p only
with --release_unprotected_stats), tests/learning/test_fedhdp.py (one
seeded initial model) and tests/tasks/test_mnist.py (pixels in [0, 1])."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tff_hdp.tasks import cross_silo
from tests import repository
from tff_hdp.privacy import plans

pytestmark = pytest.mark.tf


@pytest.mark.parametrize('n,b,steps', [(48, 32, 1), (63, 32, 1), (64, 32, 2),
                                       (32, 32, 1), (1000, 64, 15)])
def test_a_local_epoch_is_floor_n_over_b_steps_at_least_one(n, b, steps):
  assert plans.local_epoch_steps(n, b) == steps
  plan = plans.plan_client_privacy(6.0, 1e-3, n, b, rounds=10,
                                   allow_large_delta=True)
  assert plan.steps_per_round == steps
  assert plan.sampling_rate == pytest.approx(b / n, rel=1e-6)
  ditto = plans.plan_client_privacy(6.0, 1e-3, n, b, rounds=10,
                                    epochs_per_round=2, allow_large_delta=True)
  assert ditto.steps_per_round == 2 * steps


def test_schools_loss_has_the_half():
  loss = cross_silo.HalfSquaredError(reduction=tf.keras.losses.Reduction.NONE)
  got = loss(np.array([[3.0], [1.0]]), np.array([[1.0], [1.5]])).numpy()
  np.testing.assert_allclose(got, [2.0, 0.125])  # errors 2 and -0.5
  assert cross_silo.HalfSquaredError().name == 'half_squared_error'


def _untrusted(tmp_path, *extra, rounds=1, summary=False):
  out = tmp_path / f'out{len(extra)}'
  result = repository.run_program(  # what the run writes: in this process
      'run_experiment.py', '--task=digits', '--num_clients=20',
      '--algorithms=weiavg', '--epsilon_distribution=dist1',
      f'--rounds={rounds}', '--checkpoint_every=0', f'--output_dir={out}',
      *extra)
  assert result.returncode == 0, result.stderr[-2000:]
  with open(out / 'weiavg' / 'summary.json') as f:
    run = json.load(f)
  if summary:
    with open(out / 'weiavg' / 'rounds.csv') as f:
      return run, f.read().splitlines()
  return result.stdout, run['settings']


def test_robust_hdp_lists_take_its_authors_clip_and_delta(tmp_path):
  stdout, settings = _untrusted(tmp_path)
  assert ("--epsilon_distribution=dist1: the Robust-HDP authors' c = 3 and "
          'delta = 0.0001 (give --dp_sgd_clip or --deltas to change them).'
          in stdout.splitlines())
  assert (settings['clip_norm'], settings['delta']) == (3.0, 1e-4)
  stdout, settings = _untrusted(tmp_path, '--dp_sgd_clip=1.5')
  assert ("--epsilon_distribution=dist1: the Robust-HDP authors' delta = "
          '0.0001 (give --dp_sgd_clip or --deltas to change them).'
          in stdout.splitlines())
  assert (settings['clip_norm'], settings['delta']) == (1.5, 1e-4)


def test_mrmtls_pull_is_clipped_with_each_example_by_default():
  from tff_hdp.simulation import cross_silo_setting  # pylint: disable=g-import-not-at-top
  settings = cross_silo_setting.CrossSiloSettings(
      rounds=1, epsilons=(1.0,), delta=1e-3, learning_rate=0.1, clip_norm=1.0)
  assert settings.regularizer_placement == 'per_example'
  from tff_hdp.cli import flags  # pylint: disable=g-import-not-at-top
  assert flags.REGULARIZER_PLACEMENT.default == 'per_example'


def test_t_rounds_are_trained_and_accounted(tmp_path):
  """Neither the MR-MTL authors' T + 1 nor the Robust-HDP authors' T - 1
  trained rounds: rounds.csv has T rows, and after the last one every
  client has spent its whole target, no more."""
  run, lines = _untrusted(tmp_path, rounds=3, summary=True)
  header = lines[0].split(',')
  assert [row.split(',')[0] for row in lines[1:]] == ['1', '2', '3']
  spent = float(lines[-1].split(',')[header.index('max_epsilon_spent')])
  assert spent == pytest.approx(max(run['target_epsilons']), rel=1e-3)
  first = float(lines[1].split(',')[header.index('max_epsilon_spent')])
  assert first < spent
