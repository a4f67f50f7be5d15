"""The papers' claims, checked on the summaries finished runs wrote.

A reproduction counts when its numbers say what the paper says, so each
claim reads the runs' `summary.json` files and either holds or fails with
the numbers that decide it (`benchmarks/paper_claims.py` is the command):

- FedHDP (a reproduce.py preset folder): FedHDP r=0.01 beats DP-FedAvg's
  Acc_g by a margin; the published table's order of Acc_g holds; on skewed
  non-IID MNIST the opt-out clients score above the private ones.
- Cross-silo (run_experiment.py sweep folders): MR-MTL's best setting is at
  least as good as the best of local training and of FedAvg.
- Untrusted server (run_experiment.py folders, one per seed and learning
  rate): each rule's accuracy over seeds, at the learning rate best for it,
  and whether Robust-HDP's mean is the highest.
- Robust-HDP's Figure 2 (the reproduce.py preset folder robust_hdp_fig2,
  its `results.csv`: one row per distribution and seed), on the
  distributions whose five rules have all finished, each rule's mean over
  seeds: Robust-HDP's Acc_g is the highest; its gap over the best baseline
  grows from Dist1 toward Dist9 (a positive least-squares slope over k,
  from two finished distributions on, beyond the seeds' spread where
  Dist1 and Dist9 have several); PFA does not beat WeiAvg.
- Robust-HDP's Table 2 (the JSON benchmarks/noise_power.py writes): on every
  distribution Robust-HDP's measured aggregate noise power is within 1% of
  the oracle's, and Robust-HDP < WeiAvg < DPFedAvg < minimum eps.

Accuracies are in % on a test set of `test_examples` images; two
configurations whose Acc_g differ by less than two standard errors of the
difference (binomial, as if independent) are a tie, not an order.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import json
import math
import os
import statistics

from tff_hdp.reporting import published
from tff_hdp.reporting import tables
from tff_hdp import metrics

UNTRUSTED_ALGORITHMS = ('robust_hdp', 'weiavg', 'dpfedavg', 'min_epsilon')


@dataclasses.dataclass(frozen=True)
class Claim:
  name: str
  holds: bool
  detail: str


def print_claims(claims: list[Claim]) -> int:
  """Prints each claim as HOLDS or FAILS with its numbers; returns how many
  failed."""
  for claim in claims:
    print(f"{'HOLDS' if claim.holds else 'FAILS'}  {claim.name}: "
          f'{claim.detail}')
  return sum(not c.holds for c in claims)


def load_summaries(directory: str) -> list[dict]:
  """Every summary.json under `directory`, each with its folder as `_dir`."""
  if not os.path.isdir(directory):
    raise FileNotFoundError(f'{directory} is not a folder of runs.')
  summaries = []
  for root, _, files in sorted(os.walk(directory)):
    if 'summary.json' in files:
      with open(os.path.join(root, 'summary.json')) as f:
        summaries.append(dict(json.load(f), _dir=root))
  if not summaries:
    raise FileNotFoundError(f'no summary.json under {directory}.')
  return summaries


def tie_margin(acc_a: float, acc_b: float, test_examples: int) -> float:
  """Two standard errors (in points) of the difference of two accuracies."""
  var = sum(p / 100 * (1 - p / 100) for p in (acc_a, acc_b)) / test_examples
  return 200 * math.sqrt(var)


def _label(summary: dict) -> str:
  if summary['algorithm'] == 'fedhdp':
    return ('FedHDP, each level\'s r' if summary['ratio'] is None else
            f"FedHDP r={summary['ratio']:g}")
  return tables.PAPER_NAMES.get(summary['algorithm'], summary['algorithm'])


def _blocks(summaries: list[dict]) -> dict[str, list[dict]]:
  """FedHDP runs grouped by Ditto block (the folder above each run)."""
  blocks = {}
  for s in summaries:
    if 'algorithm' in s:
      blocks.setdefault(os.path.basename(os.path.dirname(s['_dir'])),
                        []).append(s)
  if not blocks:
    raise ValueError('no FedHDP / DP-FedAvg / Non-Private runs found '
                     '(reproduce.py writes them under <preset>/<block>/).')
  return dict(sorted(blocks.items()))


def fedhdp_claims(preset: str, preset_dir: str, margin: float = 2.0,
                  test_examples: int = 10_000) -> list[Claim]:
  """r=0.01 vs DP-FedAvg, and the published order, in each Ditto block."""
  claims = []
  for block, runs in _blocks(load_summaries(preset_dir)).items():
    acc = {_label(s): s['metrics']['acc_g'] for s in runs}
    if 'FedHDP r=0.01' in acc and 'DP-FedAvg' in acc:
      gain = acc['FedHDP r=0.01'] - acc['DP-FedAvg']
      claims.append(Claim(
          f'{preset}/{block}: FedHDP r=0.01 beats DP-FedAvg by >= {margin:g}',
          gain >= margin,
          f"{acc['FedHDP r=0.01']:.2f} - {acc['DP-FedAvg']:.2f} = "
          f'{gain:+.2f} points'))
    order = _order_claim(preset, block, runs, test_examples)
    if order:
      claims.append(order)
  return claims


def _order_claim(preset, block, runs, test_examples) -> Claim | None:
  """Every pair the paper orders (published gap beyond a tie) keeps its
  order, or ties; a reversal beyond a tie fails. None: no such pair ran."""
  rows = []
  for s in runs:
    figures = published.summary_acc_g(preset, s)
    if figures:
      rows.append((_label(s), s['metrics']['acc_g'], figures))
  rows.sort(key=lambda r: -min(r[2]))
  reversed_pairs, ties, compared = [], [], 0
  for i, (name_a, acc_a, pub_a) in enumerate(rows):
    for name_b, acc_b, pub_b in rows[i + 1:]:
      # Ordered by the paper only if every published figure says so.
      if min(pub_a) - max(pub_b) < tie_margin(min(pub_a), max(pub_b),
                                              test_examples):
        continue
      compared += 1
      gap, tie = acc_a - acc_b, tie_margin(acc_a, acc_b, test_examples)
      if gap < -tie:
        reversed_pairs.append(f'{name_a} {acc_a:.2f} < {name_b} {acc_b:.2f}')
      elif gap <= tie:
        ties.append(f'{name_a} {acc_a:.2f} ~ {name_b} {acc_b:.2f}')
  if not compared:
    return None
  order = ' > '.join(f'{name} {acc:.2f}' for name, acc, _ in
                     sorted(rows, key=lambda r: -r[1]))
  detail = f'measured {order}; {compared} published pairs compared'
  if ties:
    detail += f"; ties (within 2 SE): {', '.join(ties)}"
  if reversed_pairs:
    detail += f"; reversed: {', '.join(reversed_pairs)}"
  return Claim(f"{preset}/{block}: the published table's order of Acc_g",
               not reversed_pairs, detail)


def opt_out_gain_claims(preset: str, preset_dir: str) -> list[Claim]:
  """Skewed non-IID MNIST: Acc_g,np > Acc_g,p under every FedHDP run."""
  claims = []
  for block, runs in _blocks(load_summaries(preset_dir)).items():
    for s in runs:
      if s['algorithm'] != 'fedhdp':
        continue
      m = s['metrics']
      name = f'{preset}/{block}: {_label(s)} opt-out gain, Acc_g,np > Acc_g,p'
      if m.get('acc_g_p') is None:
        claims.append(Claim(
            name, False, 'Acc_g,p was withheld: re-run with '
            '--release_unprotected_stats to check this claim'))
        continue
      claims.append(Claim(
          name, m['acc_g_np'] > m['acc_g_p'],
          f"Acc_g,np {m['acc_g_np']:.2f} vs Acc_g,p {m['acc_g_p']:.2f}"))
  return claims


_CROSS_SILO_SHARED = ('rounds', 'epsilons', 'delta', 'clip_norm', 'seed')


def cross_silo_sweep(directory: str) -> dict:
  """The cross-silo runs under `directory`: per method its best run and its
  number of runs, and MR-MTL's curve (per lambda, the best run over learning rates).

  The runs must share task, rounds, privacy and clipping (they may differ in
  learning rate and lambda, the swept hyperparameters).
  """
  runs = [s for s in load_summaries(directory) if 'method' in s]
  settings = {(s['task'], s['metric_name'],
               json.dumps([s['settings'][k] for k in _CROSS_SILO_SHARED]),
               # Runs from before the choice were accounted with RDP.
               s['settings'].get('accountant', 'rdp'),
               s['settings'].get('pld_discretization'))
              for s in runs}
  if len(settings) != 1:
    raise ValueError(f'{directory}: the runs differ in task or settings '
                     f'({len(settings)} kinds); compare like with like.')
  metric = metrics.get(runs[0]['metric_name'])
  best, curve = {}, {}
  for s in runs:
    if s['method'] not in best or metric.better(s['metric'],
                                                best[s['method']]['metric']):
      best[s['method']] = s
    lam = s['settings']['regularization']
    if s['method'] == 'mrmtl' and (
        lam not in curve or metric.better(s['metric'], curve[lam]['metric'])):
      curve[lam] = s
  return {'task': runs[0]['task'], 'metric': metric,
          'runs': collections.Counter(s['method'] for s in runs),
          'epsilons': ','.join(f'{e:g}'
                               for e in runs[0]['settings']['epsilons']),
          'best': best, 'curve': dict(sorted(curve.items()))}


def _need(sweep: dict, directory: str, methods) -> None:
  missing = set(methods) - set(sweep['best'])
  if missing:
    raise ValueError(f'{directory}: no run of {", ".join(sorted(missing))}.')


def cross_silo_claim(directory: str) -> Claim:
  """MR-MTL's best run is at least as good as local's and FedAvg's best."""
  sweep = cross_silo_sweep(directory)
  _need(sweep, directory, ('mrmtl', 'local', 'fedavg'))
  best, metric = sweep['best'], sweep['metric']
  holds = all(not metric.better(best[m]['metric'], best['mrmtl']['metric'])
              for m in ('local', 'fedavg'))
  detail = ', '.join(
      f"{m} {best[m]['metric']:.5g} (lr {best[m]['settings']['learning_rate']:g}"
      + (f", lambda {best[m]['settings']['regularization']:g}"
         if m == 'mrmtl' else '') + ')'
      for m in ('mrmtl', 'local', 'fedavg'))
  return Claim(f"{sweep['task']} at eps {sweep['epsilons']}: MR-MTL's best "
               f'{metric.name} at least as good as local and FedAvg', holds,
               f'best: {detail}')


def mrmtl_lambda_claim(directory: str) -> Claim:
  """MR-MTL's best lambda lies strictly inside the swept lambdas: the curve of
  the best metric over learning rates against lambda turns (the paper's U)."""
  sweep = cross_silo_sweep(directory)
  _need(sweep, directory, ('mrmtl',))
  curve, lambdas = sweep['curve'], list(sweep['curve'])
  best = sweep['best']['mrmtl']['settings']['regularization']
  return Claim(
      f"{sweep['task']} at eps {sweep['epsilons']}: MR-MTL's best lambda "
      'inside the swept lambdas', lambdas[0] < best < lambdas[-1],
      f"lambda* = {best:g}; {sweep['metric'].name} per lambda: " + ', '.join(
          f"{lam:g}: {curve[lam]['metric']:.5g}" for lam in lambdas))


def untrusted_table(directory: str) -> list[dict]:
  """Per algorithm, the learning rate whose mean accuracy over seeds is highest
  (among those run on the most seeds), with that mean, sd and the seeds."""
  by_algorithm = {}
  for s in load_summaries(directory):
    if 'epsilon_distribution' not in s:
      continue
    if 'settings' not in s:
      raise ValueError(f"{s['_dir']}: summary has no settings (written "
                       'before they were recorded); re-run it.')
    lr, seed = s['settings']['learning_rate'], s['settings']['seed']
    runs = by_algorithm.setdefault(s['configuration'], {})
    runs.setdefault(lr, {})[seed] = s['metrics']['acc_g']
  rows = []
  order = {algorithm: i for i, algorithm in enumerate(UNTRUSTED_ALGORITHMS)}
  for algorithm in sorted(by_algorithm,
                          key=lambda a: (order.get(a, len(order)), a)):
    most = max(len(runs) for runs in by_algorithm[algorithm].values())
    lr, runs = max(((lr, runs) for lr, runs in by_algorithm[algorithm].items()
                    if len(runs) == most),
                   key=lambda item: statistics.mean(item[1].values()))
    accs = [runs[seed] for seed in sorted(runs)]
    rows.append({'algorithm': algorithm, 'learning_rate': lr,
                 'seeds': sorted(runs),
                 'acc_g': accs, 'mean': statistics.mean(accs),
                 'sd': statistics.stdev(accs) if len(accs) > 1 else 0.0,
                 'learning_rates_tried': sorted(by_algorithm[algorithm])})
  return rows


def untrusted_claim(rows: list[dict], min_seeds: int = 3) -> Claim:
  """Robust-HDP has the highest mean accuracy, every algorithm over the same
  `min_seeds` or more seeds."""
  seeds = {tuple(r['seeds']) for r in rows}
  names = {r['algorithm'] for r in rows}
  if 'robust_hdp' not in names or len(names) < 2:
    raise ValueError('need robust_hdp and at least one baseline algorithm.')
  same = len(seeds) == 1 and len(next(iter(seeds))) >= min_seeds
  top = max(rows, key=lambda r: r['mean'])
  detail = '; '.join(f"{r['algorithm']} {r['mean']:.2f} +- {r['sd']:.2f} "
                     f"(lr {r['learning_rate']:g}, seeds {r['seeds']})"
                     for r in rows)
  if not same:
    detail += f'; the algorithms were not all run on the same {min_seeds}+ seeds'
  return Claim('untrusted server: Robust-HDP has the highest mean Acc_g',
               same and top['algorithm'] == 'robust_hdp', detail)


FIGURE_RULES = ('robust_hdp', 'weiavg', 'pfa', 'dpfedavg', 'min_epsilon')


def figure_table(figure_dir: str) -> dict[int, dict[int, dict[str, float]]]:
  """Acc_g by distribution number k, seed and rule, from the figure's
  `results.csv` (one row per distribution and seed, as reproduce.py writes
  it), for the rows where every rule of `FIGURE_RULES` has finished."""
  path = os.path.join(figure_dir, 'results.csv')
  table = {}
  if os.path.exists(path):
    with open(path, newline='') as f:
      for row in csv.DictReader(f):
        accs = {rule: row.get(f'acc_g_{rule}') for rule in FIGURE_RULES}
        if all(accs.values()):
          k = int(row['distribution'].removeprefix('dist'))
          table.setdefault(k, {})[int(row.get('seed') or 0)] = {
              rule: float(acc) for rule, acc in accs.items()}
  if not table:
    raise ValueError(f'{path}: no distribution with all of '
                     f'{", ".join(FIGURE_RULES)} finished yet.')
  return {k: dict(sorted(seeds.items())) for k, seeds in sorted(table.items())}


def figure_means(table) -> dict[int, dict[str, float]]:
  """Each rule's mean Acc_g over the seeds of each distribution."""
  return {k: {rule: statistics.mean(acc[rule] for acc in seeds.values())
              for rule in FIGURE_RULES} for k, seeds in table.items()}


def figure_gaps(table) -> dict[int, list[float]]:
  """Robust-HDP's gap over the best baseline of the same seed, per seed."""
  return {k: [acc['robust_hdp'] - max(acc[r] for r in FIGURE_RULES[1:])
              for acc in seeds.values()] for k, seeds in table.items()}


def _mean_sd(values: list[float]) -> str:
  if len(values) == 1:
    return f'{values[0]:+.2f}'
  return (f'{statistics.mean(values):+.2f} +- {statistics.stdev(values):.2f} '
          f'({len(values)} seeds)')


def figure_claims(figure_dir: str,
                  test_examples: int = 10_000) -> list[Claim]:
  """Robust-HDP's Figure 2 claims on the finished distributions, each
  rule's Acc_g the mean over the seeds that finished it; a gap under two
  standard errors is a tie, which breaks no claim.

  The trend (the gap over the best baseline grows toward Dist9) is the
  least-squares slope of the mean gaps over k; where Dist1 and Dist9 each
  have two seeds or more, it must also exceed the run-to-run spread: the
  mean gap on Dist9 minus that on Dist1 above two standard errors of that
  difference (from the seeds' standard deviations). A difference within
  the spread shows no trend either way, and the claim is not shown.
  """
  table = figure_table(figure_dir)
  means, gaps_by_seed = figure_means(table), figure_gaps(table)
  gaps, beaten, tied, pfa_ahead = {}, [], [], []
  for k, acc in means.items():
    rival = max(FIGURE_RULES[1:], key=acc.get)
    gaps[k] = acc['robust_hdp'] - acc[rival]
    if -gaps[k] > tie_margin(acc['robust_hdp'], acc[rival], test_examples):
      beaten.append(f'Dist{k}')
    elif gaps[k] < 0:
      tied.append(f'Dist{k}')
    if (acc['pfa'] - acc['weiavg'] >
        tie_margin(acc['pfa'], acc['weiavg'], test_examples)):
      pfa_ahead.append(f'Dist{k}')
  seeds = {k: len(s) for k, s in table.items()}
  where = (f'Figure 2 ({len(table)} of 9 distributions: ' + ', '.join(
      f'Dist{k}' + (f' x{n} seeds' if n > 1 else '')
      for k, n in seeds.items()) + ')')
  claims = [
      Claim(f'{where}: Robust-HDP has the highest Acc_g', not beaten,
            '; '.join(f"Dist{k} robust_hdp {acc['robust_hdp']:.2f}, best "
                      f'baseline {acc["robust_hdp"] - gaps[k]:.2f}'
                      for k, acc in means.items()) +
            (f"; beaten beyond a tie on {', '.join(beaten)}" if beaten
             else '') +
            (f"; behind within a tie on {', '.join(tied)}" if tied else '')),
      Claim(f'{where}: PFA does not beat WeiAvg', not pfa_ahead,
            '; '.join(f"Dist{k} pfa {acc['pfa']:.2f}, weiavg "
                      f"{acc['weiavg']:.2f}" for k, acc in means.items()) +
            (f"; PFA ahead beyond a tie on {', '.join(pfa_ahead)}"
             if pfa_ahead else '')),
  ]
  if len(gaps) > 1:
    mean_gaps = {k: statistics.mean(g) for k, g in gaps_by_seed.items()}
    ks = list(mean_gaps)
    mean_k = statistics.mean(ks)
    slope = (sum((k - mean_k) * mean_gaps[k] for k in ks) /
             sum((k - mean_k) ** 2 for k in ks))
    detail = ('gaps ' + ', '.join(f'Dist{k} {_mean_sd(g)}'
                                  for k, g in gaps_by_seed.items()) +
              f'; slope {slope:+.3f} points per distribution')
    holds = slope > 0
    ends = (gaps_by_seed.get(1), gaps_by_seed.get(9))
    if all(g and len(g) > 1 for g in ends):
      diff = statistics.mean(ends[1]) - statistics.mean(ends[0])
      margin = 2 * math.sqrt(sum(statistics.variance(g) / len(g)
                                 for g in ends))
      spread = abs(diff) <= margin
      holds = holds and diff > margin
      detail += (f'; Dist9 - Dist1 {diff:+.2f}, two standard errors of the '
                 f'difference over seeds {margin:.2f}' +
                 ('; within the run-to-run spread: no trend shown either way'
                  if spread else ''))
    claims.append(Claim(
        f"{where}: Robust-HDP's gap over the best baseline grows toward Dist9",
        holds, detail))
  return claims


NOISE_POWER_ORDER = ('robust_hdp', 'weiavg', 'dpfedavg', 'min_epsilon')


def noise_power_claims(result: dict, tolerance: float = 0.01) -> list[Claim]:
  """Table 2's claims on the noise power measured from the drawn noise."""
  missing = [k for k in ('task', 'settings', 'distributions', 'measured')
             if k not in result]
  missing += [f'measured.{rule}' for rule in NOISE_POWER_ORDER + ('oracle',)
              if rule not in result.get('measured', {})]
  if missing:
    raise ValueError(f'a noise-power result lacks {missing}; write it with '
                     'benchmarks/noise_power.py --output.')
  measured = result['measured']
  near, ordered = [], []
  for d in result['distributions']:
    ratio = measured['robust_hdp'][d] / measured['oracle'][d]
    near.append((d, ratio, abs(ratio - 1) <= tolerance))
    powers = [measured[rule][d] for rule in NOISE_POWER_ORDER]
    ordered.append((d, powers, all(a < b for a, b in zip(powers, powers[1:]))))
  where = f"{result['task']}, E = {result['settings']['rounds']}"
  return [
      Claim(f'Table 2 ({where}): Robust-HDP\'s noise power within '
            f'{tolerance:.0%} of the oracle\'s', all(ok for *_, ok in near),
            '; '.join(f'{d} {r:.4f}x' + ('' if ok else ' (off)')
                      for d, r, ok in near)),
      Claim(f'Table 2 ({where}): Robust-HDP < WeiAvg < DPFedAvg < minimum eps',
            all(ok for *_, ok in ordered),
            '; '.join(f'{d} ' + ' < '.join(f'{v:.3g}' for v in powers) +
                      ('' if ok else ' (out of order)')
                      for d, powers, ok in ordered)),
  ]
