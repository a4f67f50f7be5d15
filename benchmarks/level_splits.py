"""Seeds of the level-split runs (RESULTS.md §14) side by side: each rule's
Acc_g, worst group and per-group accuracy as mean and range over the seeds
that have finished, and the recovery R = (rule - everyone at the strictest
level) / (everyone at the loosest - everyone at the strictest), per seed,
then its mean and range.

The strictest end is the split's own `dp_fedavg` (every client at the
smallest epsilon); the loosest is `<prefix>eps10_seed<S>`'s `dp_fedavg`.

  .venv/bin/python benchmarks/level_splits.py --runs=results/follow_data \\
      --splits=by_label,thirds,fashion_by_label,fashion_thirds
"""

from __future__ import annotations

import csv
import os
import re
import sys

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tff_hdp.cli import entry  # noqa: E402  (first: names a Python without the stack)

_RUNS = flags.DEFINE_string('runs', 'results/follow_data',
                            'The folder holding <split>_seed<S>/ run folders.')
_SPLITS = flags.DEFINE_list(
    'splits', ['by_label', 'thirds', 'fashion_by_label', 'fashion_thirds'],
    'Split prefixes: <runs>/<split>_seed<S>/results.csv.')

_STRICTEST = 'dp_fedavg'


def _rows(folder: str) -> dict[str, dict[str, str]]:
  path = os.path.join(folder, 'results.csv')
  if not os.path.exists(path):
    return {}
  with open(path, newline='') as f:
    return {r['algorithm']: r for r in csv.DictReader(f)}


def _by_seed(split: str) -> dict[int, dict[str, dict[str, str]]]:
  """Each finished seed's rows by rule, from `<split>_seed<S>` and, where the
  default frontier point ran on its own, `<split>_frontier_seed<S>`."""
  pattern = re.compile(rf'{re.escape(split)}(?:_frontier)?_seed(\d+)$')
  found: dict[int, dict[str, dict[str, str]]] = {}
  for name in sorted(os.listdir(_RUNS.value)):
    m = pattern.match(name)
    rows = _rows(os.path.join(_RUNS.value, name)) if m else {}
    if rows:
      found.setdefault(int(m.group(1)), {}).update(rows)
  return found


def _loosest(split: str, seed: int) -> float | None:
  prefix = 'fashion_' if split.startswith('fashion_') else ''
  row = _rows(os.path.join(_RUNS.value, f'{prefix}eps10_seed{seed}')).get(
      _STRICTEST)
  return float(row['acc_g']) if row else None


def _level_order(column: str) -> tuple[float, str]:
  """acc_g_group_private_eps<e> by e (the strictest first), others after."""
  m = re.search(r'eps([0-9.]+)$', column)
  return (float(m.group(1)) if m else float('inf'), column)


def _span(values: list[float], digits: int = 2) -> str:
  if not values:
    return '-'
  mean = sum(values) / len(values)
  if len(values) == 1:
    return f'{mean:.{digits}f} (1 seed)'
  return (f'{mean:.{digits}f} [{min(values):.{digits}f}, '
          f'{max(values):.{digits}f}] ({len(values)} seeds)')


def _report(split: str) -> None:
  by_seed = _by_seed(split)
  if not by_seed:
    print(f'## {split}: no finished seed under {_RUNS.value}\n')
    return
  rules = sorted({a for rows in by_seed.values() for a in rows})
  group_columns = sorted({c for rows in by_seed.values()
                          for r in rows.values() for c in r
                          if c.startswith('acc_g_group_') and r[c]},
                         key=_level_order)
  columns = ['acc_g', 'acc_g_worst'] + group_columns
  print(f'## {split} (seeds {sorted(by_seed)})\n')
  print('| rule | ' + ' | '.join(columns) + ' | R |')
  print('|---' * (len(columns) + 2) + '|')
  for rule in rules:
    cells = []
    for column in columns:
      values = [float(rows[rule][column]) for rows in by_seed.values()
                if rule in rows and rows[rule].get(column)]
      cells.append(_span(values))
    recovery = []
    for seed, rows in by_seed.items():
      loose = _loosest(split, seed)
      if rule in rows and _STRICTEST in rows and loose is not None:
        strict = float(rows[_STRICTEST]['acc_g'])
        recovery.append((float(rows[rule]['acc_g']) - strict)
                        / (loose - strict))
    cells.append(_span(recovery, digits=3))
    print(f'| {rule} | ' + ' | '.join(cells) + ' |')
  print()


def main(argv):
  del argv
  if not os.path.isdir(_RUNS.value):
    raise entry.InputError(f'--runs={_RUNS.value}: not a folder.')
  for split in _SPLITS.value:
    _report(split)


if __name__ == '__main__':
  entry.run(main, __doc__, needs_tensorflow=False)
