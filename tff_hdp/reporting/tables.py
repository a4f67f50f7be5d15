"""Tables a person reads: Markdown for the terminal and files, CSV for tools.

The variance across clients in parentheses uses the papers' scale. FeO2 and
FedHDP print it for accuracies in percent, yet their values are small (e.g.
93.75(0.13)); their skewed non-IID MNIST row with r = 0, where every private
client scores 0% or 100%, reads 7.1(6.5): a Bernoulli(0.071) variance of
0.066 in fraction units, i.e. 100 x Var[accuracy as a fraction] =
Var[accuracy in %] / 100. The per-round CSVs and summaries keep Var in %^2.
"""

from __future__ import annotations

import csv
import os
from typing import Callable, Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
  cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
  widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
  lines = ['| ' + ' | '.join(c.ljust(w) for c, w in zip(r, widths)) + ' |'
           for r in cells]
  lines.insert(1, '|' + '|'.join('-' * (w + 2) for w in widths) + '|')
  return '\n'.join(lines)


VARIANCE_NOTE = ('In parentheses: variance across clients of their accuracy, '
                 "in the papers' scale, Var[accuracy in %] / 100 "
                 '(= 100 x Var[accuracy as a fraction]).')


WITHHELD_NOTE = (
    "'-' under Acc_g,p, Acc_l,p and the Delta columns: statistics of private "
    'clients that the printed epsilon does not cover are withheld '
    '(--release_unprotected_stats shows them, without privacy).')
EPSILON_NOTE = ('eps spent (target) per group: epsilon spent at the group\'s '
                'delta over the run, its target in parentheses.')


def table_notes(release_unprotected: bool) -> list[str]:
  """What the results table's cells mean, printed above it."""
  return [VARIANCE_NOTE, EPSILON_NOTE] + (
      [] if release_unprotected else [WITHHELD_NOTE])


def write_table(output_dir: str, header, rows, stem: str = 'results',
                caption: str | None = None) -> None:
  """`<stem>.md` (with `caption` above the table) and `<stem>.csv`."""
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, f'{stem}.md'), 'w') as f:
    if caption:
      f.write(caption.rstrip('\n') + '\n\n')
    f.write(markdown_table(header, rows) + '\n')
  with open(os.path.join(output_dir, f'{stem}.csv'), 'w', newline='') as f:
    csv.writer(f).writerows([list(header)] + [list(r) for r in rows])


def _acc(mean, var=None, var_scale: float = 1.0) -> str:
  if mean is None:
    return '-'
  return (f'{mean:.2f}' if var is None else
          f'{mean:.2f} ({var * var_scale:.3g})')


def _eps(summary: dict, group: dict) -> str:
  """A group's epsilon cell: the spend, or why there is none."""
  if group['target_epsilon'] is None:
    return 'none (opt-out)' if group['name'] == 'opt_out' else 'not private'
  if not summary.get('privacy_accounted', True):
    return 'not accounted (realized denominator)'
  value = group['epsilon_spent']
  return f'{value:.3g} ({group["target_epsilon"]:g})'


def _accounting(summary: dict) -> str:
  """How the run was sampled and its private means divided."""
  return (f"{summary.get('sampling', 'poisson')}, "
          f"{summary.get('denominator', 'expected')}")


_PERCENT_METRICS = ('accuracy', 'sign_accuracy')
PAPER_NAMES = {'nonprivate': 'Non-Private', 'dp_fedavg': 'DP-FedAvg',
               'fedhdp': 'FedHDP'}


def _hyperparameters(summary: dict) -> str:
  """The papers' "hyperparameters" cell: r and the Ditto lambdas in use."""
  parts = []
  if summary.get('ratio') is not None:
    parts.append(f"r={summary['ratio']:g}")
  ditto = summary.get('ditto')
  if ditto:
    lam_p, lam_np = ditto['lambda_p'], ditto['lambda_np']
    if summary['algorithm'] == 'nonprivate':
      parts.append(f'lambda_np={lam_np:g}')
    elif summary['algorithm'] == 'dp_fedavg':
      parts.append(f'lambda_p={lam_p:g}')
    elif lam_p == lam_np:
      parts.append(f'lambda_p=lambda_np={lam_p:g}')
    else:
      parts.append(f'lambda_p={lam_p:g}, lambda_np={lam_np:g}')
  return ', '.join(parts) or '-'


def _published(figures: Sequence[float]) -> str:
  if not figures:
    return '-'
  low, high = min(figures), max(figures)
  return f'{low:g}' if low == high else f'{low:g}-{high:g}'


def results_table(summaries: Sequence[dict], paper_layout: bool = False,
                  published: Callable[[dict], Sequence[float]] | None = None):
  """SPEC.md §1 metrics, variance across clients in parentheses.

  Accuracy variances are shown in the papers' scale (`VARIANCE_NOTE`; other
  metrics, e.g. MSE, as they are). `paper_layout` names the algorithms as
  the papers do and adds their "hyperparameters" column (r, Ditto lambdas).
  `published(summary)` gives the papers' Acc_g for a run (a range where
  their Ditto blocks differ) for a last column beside the measured one.
  """
  personalized = any(s['metrics'].get('acc_l_p') is not None or
                     s['metrics'].get('acc_l_np') is not None
                     for s in summaries)
  header = ['Algorithm'] + (['hyperparameters'] if paper_layout else [])
  header += ['Acc_g', 'Acc_g,p', 'Acc_g,np', 'Delta_g']
  if personalized:
    header += ['Acc_l,p', 'Acc_l,np', 'Delta_l']
  header += ['eps spent (target) per group', 'sampling, denominator',
             'seconds']
  if published:
    header += ['published Acc_g']
  rows = []
  for s in summaries:
    m = s['metrics']
    scale = 0.01 if s.get('metric', 'accuracy') in _PERCENT_METRICS else 1.0
    eps = ', '.join(f"{g['name']}: {_eps(s, g)}" for g in s['groups'])
    row = ([PAPER_NAMES.get(s['algorithm'], s['algorithm']),
            _hyperparameters(s)] if paper_layout else [s['configuration']])
    row += [
        _acc(m.get('acc_g')),
        _acc(m.get('acc_g_p'), m.get('var_g_p'), scale),
        _acc(m.get('acc_g_np'), m.get('var_g_np'), scale),
        _acc(m.get('delta_g')),
    ]
    if personalized:
      row += [_acc(m.get('acc_l_p'), m.get('var_l_p'), scale),
              _acc(m.get('acc_l_np'), m.get('var_l_np'), scale),
              _acc(m.get('delta_l'))]
    row += [eps, _accounting(s), f"{s['seconds']:.0f}"]
    if published:
      row.append(_published(published(s)))
    rows.append(row)
  return header, rows
