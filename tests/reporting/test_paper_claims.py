"""The claims check on summaries written here: it holds and fails where the
numbers say so, and refuses runs that are not comparable."""

import csv
import json
import math
import os
import subprocess
import sys

import pytest

from tff_hdp.reporting import paper_claims
from tff_hdp.reporting import published
from tests import repository

ROOT = repository.ROOT


def _write(path, summary):
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, 'summary.json'), 'w') as f:
    json.dump(summary, f)


def _fedhdp_run(preset_dir, block, algorithm, acc_g, ratio=None,
                acc_p=80.0, acc_np=90.0):
  name = f'fedhdp_r{ratio:g}' if algorithm == 'fedhdp' else algorithm
  lam = None if block == 'no_ditto' else float(block[len('lambda'):])
  _write(os.path.join(preset_dir, block, name), {
      'configuration': name, 'algorithm': algorithm, 'ratio': ratio,
      'ditto': lam and {'lambda_p': lam, 'lambda_np': lam},
      'metrics': {'acc_g': acc_g, 'acc_g_p': acc_p, 'acc_g_np': acc_np}})


def test_tie_margin_is_two_standard_errors_of_the_difference():
  # 90% and 90% on 10,000 images: 2 sqrt(2 * 0.9 * 0.1 / 10^4) = 0.8485 pts.
  assert paper_claims.tie_margin(90, 90, 10_000) == pytest.approx(
      2 * math.sqrt(2 * 0.09 / 1e4) * 100)


def test_published_figures_by_block_and_across_blocks():
  assert published.acc_g('mnist_noniid', 'fedhdp', 0.01, 0.005) == [92.48]
  assert published.acc_g('mnist_noniid', 'dp_fedavg') == [88.75, 87.98, 88.26]
  assert published.acc_g('mnist_noniid', 'fedhdp', 0.5) == []  # not in grid
  assert published.acc_g('digits', 'nonprivate') == []


def test_fedhdp_margin_and_order_hold_or_fail_on_the_numbers(tmp_path):
  preset_dir = str(tmp_path / 'mnist_noniid')
  _fedhdp_run(preset_dir, 'lambda0.005', 'nonprivate', 92.0)
  _fedhdp_run(preset_dir, 'lambda0.005', 'dp_fedavg', 87.0)
  _fedhdp_run(preset_dir, 'lambda0.005', 'fedhdp', 90.0, ratio=0.01)
  _fedhdp_run(preset_dir, 'lambda0.005', 'fedhdp', 90.5, ratio=0.1)  # tie
  # Without Ditto: r=0.01 only 1.5 above DP-FedAvg, and below r=1 by more
  # than a tie (published: 92.41-92.48 against 87.71-89.64).
  _fedhdp_run(preset_dir, 'no_ditto', 'dp_fedavg', 87.0)
  _fedhdp_run(preset_dir, 'no_ditto', 'fedhdp', 88.5, ratio=0.01)
  _fedhdp_run(preset_dir, 'no_ditto', 'fedhdp', 89.6, ratio=1)
  claims = {c.name: c for c in paper_claims.fedhdp_claims(
      'mnist_noniid', preset_dir)}
  assert claims['mnist_noniid/lambda0.005: FedHDP r=0.01 beats DP-FedAvg by '
                '>= 2'].holds
  order = claims["mnist_noniid/lambda0.005: the published table's order of "
                 'Acc_g']
  assert order.holds and 'FedHDP r=0.01 90.00 ~ FedHDP r=0.1 90.50' in (
      order.detail)
  assert not claims['mnist_noniid/no_ditto: FedHDP r=0.01 beats DP-FedAvg by '
                    '>= 2'].holds
  order = claims["mnist_noniid/no_ditto: the published table's order of Acc_g"]
  assert not order.holds
  assert 'reversed: FedHDP r=0.01 88.50 < FedHDP r=1 89.60' in order.detail


def test_opt_out_gain_fails_where_opt_out_clients_score_lower(tmp_path):
  preset_dir = str(tmp_path / 'mnist_noniid_skewed')
  _fedhdp_run(preset_dir, 'no_ditto', 'fedhdp', 87.0, 0.1, 85.0, 98.0)
  _fedhdp_run(preset_dir, 'no_ditto', 'fedhdp', 87.0, 1, 88.0, 87.5)
  claims = paper_claims.opt_out_gain_claims('mnist_noniid_skewed', preset_dir)
  assert [c.holds for c in claims] == [True, False]


def _silo_run(directory, method, lr, metric, lam=0.0, epsilon=6.0):
  _write(os.path.join(directory, f'{method}_lr{lr}_lambda{lam}'), {
      'method': method, 'task': 'school', 'metric_name': 'mse',
      'metric': metric, 'settings': {
          'rounds': 200, 'epsilons': [epsilon], 'delta': 1e-3,
          'clip_norm': 1.0, 'seed': 0, 'learning_rate': lr,
          'regularization': lam}})


def test_cross_silo_claim_compares_best_settings_lower_mse_better(tmp_path):
  _silo_run(tmp_path, 'local', 0.01, 0.026)
  _silo_run(tmp_path, 'local', 0.1, 0.25)
  _silo_run(tmp_path, 'fedavg', 0.03, 0.024)
  _silo_run(tmp_path, 'mrmtl', 0.01, 0.0226, lam=1.0)
  _silo_run(tmp_path, 'mrmtl', 0.03, 0.030, lam=3.0)
  claim = paper_claims.cross_silo_claim(str(tmp_path))
  assert claim.holds, claim.detail
  assert 'mrmtl 0.0226 (lr 0.01, lambda 1)' in claim.detail
  _silo_run(tmp_path / 'more', 'fedavg', 0.1, 0.02)  # FedAvg now better
  assert not paper_claims.cross_silo_claim(str(tmp_path)).holds
  _silo_run(tmp_path / 'other_eps', 'local', 0.01, 0.01, epsilon=1.0)
  with pytest.raises(ValueError, match='differ in task or settings'):
    paper_claims.cross_silo_claim(str(tmp_path))


def test_mrmtl_lambda_claim_wants_the_best_lambda_inside_the_grid(tmp_path):
  for lam, lr, mse in [(0.01, 0.01, 0.030), (0.01, 0.03, 0.027),
                       (1.0, 0.01, 0.0226), (1.0, 0.03, 0.025),
                       (10.0, 0.01, 0.024)]:
    _silo_run(tmp_path, 'mrmtl', lr, mse, lam=lam)
  _silo_run(tmp_path, 'local', 0.01, 0.001)  # not MR-MTL: not on the curve
  claim = paper_claims.mrmtl_lambda_claim(str(tmp_path))
  assert claim.holds, claim.detail
  assert 'lambda* = 1;' in claim.detail
  assert '0.01: 0.027, 1: 0.0226, 10: 0.024' in claim.detail
  # The best at the largest lambda: the curve never turns inside the grid.
  _silo_run(tmp_path / 'more', 'mrmtl', 0.003, 0.02, lam=10.0)
  claim = paper_claims.mrmtl_lambda_claim(str(tmp_path))
  assert not claim.holds and 'lambda* = 10;' in claim.detail
  _silo_run(tmp_path / 'baselines', 'local', 0.01, 0.026)
  with pytest.raises(ValueError, match='no run of mrmtl'):
    paper_claims.mrmtl_lambda_claim(str(tmp_path / 'baselines'))


def _untrusted_run(directory, rule, lr, seed, acc):
  _write(os.path.join(directory, f'lr{lr}', f'seed{seed}', rule), {
      'configuration': rule, 'epsilon_distribution': 'uniform',
      'settings': {'learning_rate': lr, 'seed': seed},
      'metrics': {'acc_g': acc}})


def test_untrusted_table_takes_each_rules_best_learning_rate(tmp_path):
  for seed, (robust, weiavg) in enumerate([(90, 89), (91, 88), (89, 89.5)]):
    _untrusted_run(tmp_path, 'robust_hdp', 1.0, seed, robust)
    _untrusted_run(tmp_path, 'robust_hdp', 0.1, seed, robust - 4)
    _untrusted_run(tmp_path, 'weiavg', 0.3, seed, weiavg)
  _untrusted_run(tmp_path, 'weiavg', 1.0, 0, 95)  # one seed only: not chosen
  rows = {r['algorithm']: r for r in paper_claims.untrusted_table(str(tmp_path))}
  assert rows['robust_hdp']['learning_rate'] == 1.0
  assert rows['robust_hdp']['mean'] == pytest.approx(90)
  assert rows['weiavg']['learning_rate'] == 0.3
  assert rows['weiavg']['acc_g'] == [89, 88, 89.5]
  assert paper_claims.untrusted_claim(list(rows.values())).holds
  # Robust-HDP behind on average: the claim fails.
  _untrusted_run(tmp_path, 'dpfedavg', 0.3, 0, 92)
  _untrusted_run(tmp_path, 'dpfedavg', 0.3, 1, 92)
  _untrusted_run(tmp_path, 'dpfedavg', 0.3, 2, 92)
  assert not paper_claims.untrusted_claim(
      paper_claims.untrusted_table(str(tmp_path))).holds


def test_untrusted_claim_needs_the_same_seeds_for_every_rule(tmp_path):
  for seed in range(3):
    _untrusted_run(tmp_path, 'robust_hdp', 1.0, seed, 95)
  _untrusted_run(tmp_path, 'weiavg', 0.3, 0, 80)
  claim = paper_claims.untrusted_claim(
      paper_claims.untrusted_table(str(tmp_path)))
  assert not claim.holds and 'not all run on the same 3+ seeds' in claim.detail


@pytest.mark.tf  # --cross_silo_dirs reads runs through the cross-silo setting
def test_command_exits_1_when_a_claim_fails_and_names_missing_folders(
    tmp_path):
  preset_dir = str(tmp_path / 'mnist_noniid')
  _fedhdp_run(preset_dir, 'no_ditto', 'dp_fedavg', 87.0)
  _fedhdp_run(preset_dir, 'no_ditto', 'fedhdp', 88.0, ratio=0.01)
  script = os.path.join(ROOT, 'benchmarks', 'paper_claims.py')
  result = subprocess.run([sys.executable, script,
                           f'--preset_dirs={preset_dir}'],
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 1, result.stderr[-2000:]
  assert 'FAILS  mnist_noniid/no_ditto: FedHDP r=0.01 beats DP-FedAvg' in (
      result.stdout)
  result = subprocess.run([sys.executable, script,
                           f'--cross_silo_dirs={tmp_path}/nowhere'],
                          capture_output=True, text=True, timeout=300)
  assert result.returncode != 0
  assert 'nowhere is not a folder of runs' in result.stderr


def _noise_power_result(robust_over_oracle, order):
  """A Table 2 result on two distributions: WeiAvg, DPFedAvg and minimum eps
  at `order`'s powers, Robust-HDP at `robust_over_oracle` times the oracle."""
  measured = {rule: {} for rule in ('weiavg', 'dpfedavg', 'min_epsilon',
                                    'robust_hdp', 'oracle')}
  for d in ('dist1', 'dist6'):
    measured['oracle'][d] = 0.5
    measured['robust_hdp'][d] = 0.5 * robust_over_oracle[d]
    for rule, value in zip(('weiavg', 'dpfedavg', 'min_epsilon'), order[d]):
      measured[rule][d] = value
  return {'task': 'fashion_mnist_iid', 'settings': {'rounds': 200},
          'distributions': ['dist1', 'dist6'], 'measured': measured}


def test_table2_claims_hold_and_fail_on_the_measured_powers():
  good = _noise_power_result({'dist1': 1.004, 'dist6': 0.998},
                             {'dist1': (1, 2, 3), 'dist6': (4, 5, 60)})
  assert [c.holds for c in paper_claims.noise_power_claims(good)] == [
      True, True]
  # Robust-HDP 1.5% above the oracle on dist6; DPFedAvg below WeiAvg on dist1.
  bad = _noise_power_result({'dist1': 1.004, 'dist6': 1.015},
                            {'dist1': (2, 1, 3), 'dist6': (4, 5, 60)})
  near, order = paper_claims.noise_power_claims(bad)
  assert not near.holds and 'dist6 1.0150x (off)' in near.detail
  assert 'dist1 1.0040x;' in near.detail
  assert not order.holds and 'dist1 0.502 < 2 < 1 < 3 (out of order)' in (
      order.detail)
  # Robust-HDP above WeiAvg breaks the order too.
  above = _noise_power_result({'dist1': 1.0, 'dist6': 1.0},
                              {'dist1': (0.4, 2, 3), 'dist6': (4, 5, 60)})
  assert not paper_claims.noise_power_claims(above)[1].holds
  with pytest.raises(ValueError, match=r"lacks \['measured.oracle'\]"):
    del good['measured']['oracle']
    paper_claims.noise_power_claims(good)


def _figure(figure_dir, accs):
  """Writes a Figure 2 results.csv as reproduce.py does: `accs[k]` holds the
  five rules' Acc_g on Dist k (seed 0), or {seed: five Acc_g}."""
  os.makedirs(figure_dir, exist_ok=True)
  with open(os.path.join(figure_dir, 'results.csv'), 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['distribution', 'seed', *(
        f'{c}_{rule}' for rule in paper_claims.FIGURE_RULES
        for c in ('acc_g', 'learning_rate'))])
    for k, row in accs.items():
      for seed, accs_k in (row if isinstance(row, dict) else {0: row}).items():
        writer.writerow([f'dist{k}', seed, *(
            v for acc in accs_k for v in ('' if acc is None else acc, 0.1))])


def test_figure2_claims_on_the_finished_distributions(tmp_path):
  figure_dir = str(tmp_path / 'robust_hdp_fig2')
  # robust_hdp, weiavg, pfa, dpfedavg, min_epsilon; the gap grows 1 -> 9;
  # Dist5 unfinished.
  _figure(figure_dir, {1: (80, 78, 77, 76, 70), 9: (70, 60, 59, 55, 40),
                       5: (10, None, None, None, None)})
  assert list(paper_claims.figure_table(figure_dir)) == [1, 9]
  claims = paper_claims.figure_claims(figure_dir)
  assert [c.holds for c in claims] == [True, True, True]
  assert 'Dist1 +2.00, Dist9 +10.00' in claims[2].detail
  # The gap shrinks, PFA beats WeiAvg, a baseline beats Robust-HDP.
  _figure(figure_dir, {1: (80, 70, 71, 60, 60), 9: (70, 71, 76, 60, 50)})
  claims = paper_claims.figure_claims(figure_dir)
  assert [c.holds for c in claims] == [False, False, False]
  assert 'beaten beyond a tie on Dist9' in claims[0].detail
  assert 'PFA ahead beyond a tie on Dist9' in claims[1].detail  # 1 a tie


def test_figure2_gaps_within_a_tie_break_no_claim_and_one_dist_has_no_trend(
    tmp_path):
  figure_dir = str(tmp_path / 'robust_hdp_fig2')
  _figure(figure_dir, {2: (80.0, 80.5, 80.8, 79, 75)})
  claims = paper_claims.figure_claims(figure_dir)
  assert [c.holds for c in claims] == [True, True]  # no trend from one
  assert claims[0].detail.endswith('; behind within a tie on Dist2')
  with pytest.raises(ValueError, match='no distribution with all of'):
    paper_claims.figure_claims(str(tmp_path / 'nothing'))


def test_figure2_trend_over_seeds_must_exceed_their_spread(tmp_path):
  """With three seeds on Dist1 and Dist9 the rules are compared on their
  means, and the trend must beat two standard errors of the seeds' gaps."""
  figure_dir = str(tmp_path / 'robust_hdp_fig2')
  # Gaps over the best baseline: Dist1 +2, +0, +1; Dist9 +3, -1, +4.
  _figure(figure_dir, {
      1: {0: (80, 78, 1, 1, 1), 1: (79, 79, 1, 1, 1), 2: (80, 79, 1, 1, 1)},
      9: {0: (63, 60, 1, 1, 1), 1: (60, 61, 1, 1, 1), 2: (64, 60, 1, 1, 1)}})
  table = paper_claims.figure_table(figure_dir)
  assert {k: list(seeds) for k, seeds in table.items()} == {
      1: [0, 1, 2], 9: [0, 1, 2]}
  assert paper_claims.figure_gaps(table) == {1: [2, 0, 1], 9: [3, -1, 4]}
  assert paper_claims.figure_means(table)[9]['robust_hdp'] == (
      pytest.approx(62.33, abs=0.01))
  trend = paper_claims.figure_claims(figure_dir)[2]
  # Mean gaps +1 and +2: a positive slope, but 2 SE = 2 sqrt(1/3 + 7/3).
  assert not trend.holds
  assert 'Dist1 +1.00 +- 1.00 (3 seeds)' in trend.detail
  assert 'Dist9 - Dist1 +1.00, two standard errors of the difference over ' \
      'seeds 3.27; within the run-to-run spread' in trend.detail
  # The same spread, the gap on Dist9 far larger: shown.
  _figure(figure_dir, {
      1: {0: (80, 78, 1, 1, 1), 1: (79, 79, 1, 1, 1), 2: (80, 79, 1, 1, 1)},
      9: {0: (70, 60, 1, 1, 1), 1: (66, 60, 1, 1, 1), 2: (71, 60, 1, 1, 1)}})
  trend = paper_claims.figure_claims(figure_dir)[2]
  assert trend.holds and 'within the run-to-run spread' not in trend.detail


def test_command_checks_a_figure_folder(tmp_path):
  figure_dir = str(tmp_path / 'robust_hdp_fig2')
  _figure(figure_dir, {1: (80, 78, 77, 76, 70), 3: (75, 70, 69, 65, 60)})
  result = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'benchmarks', 'paper_claims.py'),
       f'--preset_dirs={figure_dir}'], capture_output=True, text=True,
      timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  assert '| Dist3        | 0     | 75.00' in result.stdout
  assert '3 of 3 claims hold.' in result.stdout
