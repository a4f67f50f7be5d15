"""The three examples, each run as a user runs it (a script of their own,
from another folder, importing the installed library): FedHDP's rule in
stock TFF, a trusted rule and an untrusted rule with an option, each
registered from user code and trained from the command line."""

import csv
import json
import os
import subprocess
import sys

import dp_accounting
import pytest
from dp_accounting import pld
from dp_accounting import rdp

from tests import repository

pytestmark = pytest.mark.tf

EXAMPLES = os.path.join(repository.ROOT, 'examples')


def _example(name, *flags, cwd):
  return subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *flags],
                        cwd=cwd, capture_output=True, text=True, timeout=600)


def _rows(run_dir):
  with open(os.path.join(run_dir, 'rounds.csv')) as f:
    return list(csv.DictReader(f))


def test_fedhdp_aggregation_trains_in_stock_tff(tmp_path):
  result = _example('stock_tff.py', '--rounds=2', cwd=tmp_path)
  assert result.returncode == 0, result.stderr[-3000:]
  lines = result.stdout.splitlines()
  assert lines[-3].startswith('round 1: clip norm 1.000, eps spent ')
  # Calibrated for the 2 rounds: each private level reaches its target.
  assert lines[-2].endswith('eps spent 1.000, 4.000, -'), lines[-2]
  assert lines[-1].startswith('final model: [')


def test_a_trusted_rule_from_user_code_trains_beside_fedhdp(tmp_path):
  """Registered in user code and chosen with --algorithms: its own rows, the
  measurements its record declares, and per group the epsilon of the noise
  it applies, as dp_accounting's PLD accountant computes it (a fixed clip: no
  count query, so z_j alone, Poisson at q, T rounds), and RDP's beside it."""
  out = tmp_path / 'out'
  result = _example('trusted_rule.py', '--algorithms=groupwise_fixed,fedhdp',
                    '--epsilons=1,4', '--rounds=3', '--clients_per_round=20',
                    '--eval_every=3', f'--output_dir={out}', cwd=tmp_path)
  assert result.returncode == 0, result.stderr[-3000:]
  assert '| groupwise_fixed ' in result.stdout
  ours, fedhdp = _rows(out / 'groupwise_fixed'), _rows(out / 'fedhdp')
  assert ours != fedhdp
  assert list(ours[0]) == [
      'round', 'clip_norm', 'weight_private_eps1', 'noise_std_private_eps1',
      'epsilon_private_eps1', 'weight_private_eps4', 'noise_std_private_eps4',
      'epsilon_private_eps4', 'weight_opt_out', 'noise_std_opt_out',
      'epsilon_opt_out', 'acc_g', 'acc_g_np', 'var_g_np', 'acc_l_np',
      'var_l_np']
  with open(out / 'groupwise_fixed' / 'summary.json') as f:
    summary = json.load(f)
  q = summary['sampling_rate']
  assert summary['accountant'] == 'pld'
  for group in summary['groups']:
    if group['target_epsilon'] is None:
      continue
    run = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
        q, dp_accounting.GaussianDpEvent(group['noise_multiplier'])), 3)
    accountant = pld.PLDAccountant(
        value_discretization_interval=summary['pld_discretization'])
    accountant.compose(run)
    direct = accountant.get_epsilon(group['delta'])
    assert group['epsilon_spent'] == pytest.approx(direct, rel=1e-9)
    assert direct <= group['target_epsilon'] * (1 + 1e-6)
    accountant = rdp.RdpAccountant()
    accountant.compose(run)
    assert group['epsilon_spent_rdp'] == pytest.approx(
        accountant.get_epsilon(group['delta']), rel=1e-9)
    # The noise std it reports is z_j S / (q N_j).
    std = float(ours[0][f"noise_std_{group['name']}"])
    assert std == pytest.approx(
        group['noise_multiplier'] * float(ours[0]['clip_norm']) /
        (q * group['clients']), rel=1e-5)
  # Every round combines the group means with the rule's own fixed weights
  # r_j N_j / sum_k r_k N_k (FedHDP's, in its rows, differ): the rule ran.
  # (Not the accuracies: after 3 rounds at OS-drawn noise both models can
  # sit at the majority class, 11.14%, alike.)
  shares = [g['ratio'] * g['clients'] for g in summary['groups']]
  for row in ours:
    for group, share in zip(summary['groups'], shares):
      assert float(row[f"weight_{group['name']}"]) == pytest.approx(
          share / sum(shares), rel=1e-5), (row['round'], group['name'])


def test_an_untrusted_rule_with_an_option_trains_from_the_command_line(
    tmp_path):
  out = tmp_path / 'out'
  result = _example('untrusted_rule.py', '--algorithms=trimmed_mean',
                    '--trim_fraction=0.2', '--num_clients=10', '--rounds=2',
                    '--eval_every=2', '--epsilon_distribution=uniform',
                    f'--output_dir={out}', cwd=tmp_path)
  assert result.returncode == 0, result.stderr[-3000:]
  rows = _rows(out / 'trimmed_mean')
  assert [r['clients_kept'] for r in rows] == ['6', '6']  # 2 of 10 each end
  with open(out / 'trimmed_mean' / 'summary.json') as f:
    assert json.load(f)['settings']['trim_fraction'] == 0.2
  refused = _example('untrusted_rule.py', '--algorithms=weiavg',
                     '--trim_fraction=0.2', '--num_clients=10',
                     f'--output_dir={out}', cwd=tmp_path)
  assert refused.returncode == 2
  assert refused.stderr.strip().splitlines() == [
      'untrusted_rule.py: error: --trim_fraction is read by trimmed_mean '
      'only, which --algorithms=weiavg does not run; drop it.']
