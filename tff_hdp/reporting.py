"""Tables a person reads: Markdown for the terminal and files, CSV for tools."""

from __future__ import annotations

import csv
import math
import os
from typing import Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
  cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
  widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
  lines = ['| ' + ' | '.join(c.ljust(w) for c, w in zip(r, widths)) + ' |'
           for r in cells]
  lines.insert(1, '|' + '|'.join('-' * (w + 2) for w in widths) + '|')
  return '\n'.join(lines)


def write_table(output_dir: str, header, rows, stem: str = 'results') -> None:
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, f'{stem}.md'), 'w') as f:
    f.write(markdown_table(header, rows) + '\n')
  with open(os.path.join(output_dir, f'{stem}.csv'), 'w', newline='') as f:
    csv.writer(f).writerows([list(header)] + [list(r) for r in rows])


def _acc(mean, var=None) -> str:
  if mean is None:
    return '-'
  return f'{mean:.2f}' if var is None else f'{mean:.2f} ({var:.2f})'


def _eps(value) -> str:
  return 'none (opt-out)' if value is None or not math.isfinite(value) else (
      f'{value:.3g}')


def results_table(summaries: Sequence[dict]):
  """SPEC.md §1 metrics, variance across clients in parentheses."""
  personalized = any(s['metrics'].get('acc_l_p') is not None or
                     s['metrics'].get('acc_l_np') is not None
                     for s in summaries)
  header = ['Algorithm', 'Acc_g', 'Acc_g,p', 'Acc_g,np', 'Delta_g']
  if personalized:
    header += ['Acc_l,p', 'Acc_l,np', 'Delta_l']
  header += ['eps spent (target) per group', 'seconds']
  rows = []
  for s in summaries:
    m = s['metrics']
    eps = ', '.join(
        f"{g['name']}: {_eps(g['epsilon_spent'])}" +
        (f" ({g['target_epsilon']:g})" if g['target_epsilon'] else '')
        for g in s['groups'])
    row = [
        s['configuration'],
        _acc(m.get('acc_g')),
        _acc(m.get('acc_g_p'), m.get('var_g_p')),
        _acc(m.get('acc_g_np'), m.get('var_g_np')),
        _acc(m.get('delta_g')),
    ]
    if personalized:
      row += [_acc(m.get('acc_l_p'), m.get('var_l_p')),
              _acc(m.get('acc_l_np'), m.get('var_l_np')),
              _acc(m.get('delta_l'))]
    rows.append(row + [eps, f"{s['seconds']:.0f}"])
  return header, rows
