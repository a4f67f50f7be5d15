"""fedhdp_ddp from the command line: each group's printed epsilon, and
the one it prints for a round that only half the devices finish, against
dp_accounting's Gaussian at the sensitivity and local std that TFF's
factory holds in its state for the run's noise multiplier, with one slot
per device in cohorts (`--ddp_slots=own_group`, half of a group's devices
finishing); and a run whose devices drop out (`--simulate_dropout`, a
slot per group), whose printed epsilons are the Gaussian's at the shares
its rounds had.

The runs are in this process (`repository.run_program`)."""

import csv
import json
import math
import os
import re

import dp_accounting
from dp_accounting import rdp
import pytest

from tests import repository

pytestmark = [pytest.mark.tf, pytest.mark.xdist_group('test_distributed_runs')]

PER_ROUND, BITS, CLIP, DIM = 20, 16, 0.1, 650  # digits: 64 x 10 + 10


def _run(out, *flags):
  result = repository.run_program(
      'run_experiment.py', *flags, '--cohort_size=8',
      '--task=digits', '--epsilons=1,8',
      '--deltas=1e-6', '--sampling=device', '--min_separation=1',
      '--max_participations=2', '--rounds=2',
      f'--clients_per_round={PER_ROUND}', '--clip_lr=0',
      f'--clip_norm={CLIP}', f'--ddp_bits={BITS}', '--checkpoint_every=0',
      '--algorithms=fedhdp_ddp', f'--output_dir={out}')
  assert result.returncode == 0, result.stderr[-3000:]
  with open(os.path.join(out, 'fedhdp_ddp', 'summary.json')) as f:
    return json.load(f), result.stdout


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  """One slot per device in cohorts (`--ddp_slots=own_group`), whose
  accounting bounds the slot-per-group variant's with the same numbers
  (tests/privacy/test_distributed_noise.py)."""
  summary, stdout = _run(str(tmp_path_factory.mktemp('distributed')),
                         '--ddp_slots=own_group')
  assert 'sends 1 slot' in stdout
  return summary, stdout


def _tff_state(z):
  """Scaled inflated L2 bound and scaled local std from the state of
  TFF's own factory, built here for the model's size, at the run's
  conditional rounding (TFF's recommended beta, exp(-0.5))."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.aggregators import distributed_dp  # pylint: disable=g-import-not-at-top
  factory = distributed_dp.DistributedDpSumFactory(
      z, PER_ROUND, BITS, CLIP, beta=math.exp(-0.5),
      mechanism='distributed_dgauss')
  state = factory.create(tff.TensorType(np.float32, [DIM])).initialize()
  query = state[0]['inner_agg']['inner_agg_process'].query_state
  return float(query.l2_norm_bound), float(query.local_stddev)


def _gaussian_epsilon(z, participations, delta):
  accountant = rdp.RdpAccountant(orders=tuple(range(2, 257)))
  accountant.compose(dp_accounting.GaussianDpEvent(z), participations)
  return accountant.get_epsilon(delta)


@pytest.mark.parametrize('name,target', [('private_eps1', 1.0),
                                         ('private_eps8', 8.0)])
def test_each_groups_epsilon_is_the_gaussians_at_tffs_numbers(
    run, name, target):
  summary, stdout = run
  [group] = [g for g in summary['groups'] if g['name'] == name]
  sensitivity, local = _tff_state(group['noise_multiplier'])
  for shares, printed in ((PER_ROUND, group['epsilon_spent']),
                          (PER_ROUND // 2, float(re.search(
                              rf'{name}: .*if half, ([0-9.]+)',
                              stdout).group(1)))):
    want = _gaussian_epsilon(math.sqrt(shares) * local / sensitivity, 2,
                             1e-6)
    assert printed == pytest.approx(want, rel=1e-2 if shares < PER_ROUND
                                    else 1e-6)
  assert summary['accountant'] == 'rdp'  # converted RDP, not the exact curve
  assert group['epsilon_spent'] <= target
  assert group['epsilon_spent'] == pytest.approx(target, rel=1e-3)


def test_a_run_whose_devices_drop_out_prints_the_epsilon_it_gave(tmp_path):
  """Each device fails to send with probability 0.3: the summary says how
  many sent in each round, and each group's printed epsilon is
  dp_accounting's Gaussian composed over the two rounds (a device may take
  part in both) at the shares that came; the plan's, for rounds every
  device finishes, is the target. rounds.csv and the printed lines say
  the same."""
  out = str(tmp_path)
  summary, stdout = _run(out, '--simulate_dropout=0.3')
  finished = summary['simulated_dropout']['devices_finished']
  assert summary['simulated_dropout']['probability'] == 0.3
  assert len(finished) == 2 and sum(finished) < 2 * PER_ROUND, finished
  assert '--simulate_dropout=0.3: each device' in stdout
  with open(os.path.join(out, 'fedhdp_ddp', 'rounds.csv')) as f:
    last = list(csv.DictReader(f))[-1]
  for target, group in ((1.0, summary['groups'][0]),
                        (8.0, summary['groups'][1])):
    sensitivity, local = _tff_state(group['noise_multiplier'])
    accountant = rdp.RdpAccountant(orders=tuple(range(2, 257)))
    for shares in finished:
      accountant.compose(dp_accounting.GaussianDpEvent(
          math.sqrt(shares) * local / sensitivity))
    want = accountant.get_epsilon(1e-6)
    assert group['epsilon_spent'] == pytest.approx(want, rel=1e-6)
    assert group['epsilon_if_every_device_finished'] == pytest.approx(
        target, rel=1e-3)
    assert group['epsilon_spent'] > 1.05 * target
    assert float(last[f'epsilon_{group["name"]}']) == pytest.approx(
        want, rel=1e-5)
    assert re.search(rf'{group["name"]} gave eps {want:.4g} as its devices '
                     'dropped out', stdout), stdout[-2000:]
