"""Pinned outputs: short CLI runs of every setting must write what they wrote.

The code is being reorganized (a behaviour-preserving redesign). These tests
run `run_experiment.py` on a short, seeded (--unsafe_seeded_dp_randomness)
run of each setting (tests/pinned_runs.py: trusted server, trusted with Ditto
and cohorts, untrusted server, cross-silo, point estimation) and compare
everything it wrote with tests/pinned_outputs.json: the files written, every
CSV (results, rounds, sweeps), results.md's caption and table, every
summary.json and the saved models, all but wall-clock seconds. The redesign
must not change any of it.

Regenerate the pins ONLY when an output change is intended, and say so (and
why) in the commit that changes them:
  .venv/bin/python tests/pinned_runs.py              # all settings
  .venv/bin/python tests/pinned_runs.py cross_silo   # only the ones named
"""

import json
import math

import numpy as np
import pytest

from tests import pinned_runs
from tests import repository

pytestmark = pytest.mark.tf


# Numbers are written with ~6 significant digits (CSV) or in full (JSON,
# models); a benign float reordering (a sum in another order) can change the
# last printed digit, so numbers match to these tolerances. A larger
# difference is a behaviour change.
RTOL = 1e-5
ATOL = 1e-7


@pytest.fixture(scope='module')
def pinned():
  with open(pinned_runs.PINNED_FILE) as f:
    return json.load(f)


def _float(text):
  try:
    return float(text)
  except (TypeError, ValueError):
    return None


def _close(a: float, b: float) -> bool:
  if math.isnan(a) or math.isnan(b):
    return math.isnan(a) and math.isnan(b)
  return a == b or abs(a - b) <= ATOL + RTOL * abs(b)


def _compare_cell(where, got: str, want: str):
  a, b = _float(got), _float(want)
  if a is not None and b is not None:
    assert _close(a, b), f'{where}: {got} != pinned {want}'
  else:
    assert got == want, f'{where}: {got!r} != pinned {want!r}'


def _compare_table(where, got: dict, want: dict):
  """A CSV's or results.md's columns and rows (and any text around them)."""
  assert sorted(got) == sorted(want), f'{where}: parts {sorted(got)} != ' \
      f'pinned {sorted(want)}'
  for part in ('caption', 'after_table'):
    if part in want:
      assert got[part] == want[part], (
          f'{where}: {part} changed:\n{got[part]}\npinned:\n{want[part]}')
  columns = want['columns']
  assert got['columns'] == columns, (
      f'{where}: columns {got["columns"]} != pinned {columns}')
  assert len(got['rows']) == len(want['rows']), (
      f'{where}: {len(got["rows"])} rows != pinned {len(want["rows"])}')
  for i, (row, pinned_row) in enumerate(zip(got['rows'], want['rows'])):
    assert len(row) == len(pinned_row), f'{where}: row {i + 1} has ' \
        f'{len(row)} cells, pinned {len(pinned_row)}'
    for column, cell, pinned_cell in zip(columns, row, pinned_row):
      _compare_cell(f'{where}: row {i + 1} ({row[0]}), column {column!r}',
                    cell, pinned_cell)


def _compare_json(where, got, want):
  """summary.json values; numbers to the tolerances, the rest exactly."""
  if isinstance(want, dict):
    assert isinstance(got, dict), f'{where}: {got!r} is not an object'
    assert sorted(got) == sorted(want), (
        f'{where}: keys differ: new {sorted(set(got) - set(want))}, '
        f'missing {sorted(set(want) - set(got))}')
    for key in want:
      _compare_json(f'{where}.{key}', got[key], want[key])
  elif isinstance(want, list):
    assert isinstance(got, list), f'{where}: {got!r} is not a list'
    assert len(got) == len(want), (
        f'{where}: {len(got)} entries != pinned {len(want)}')
    for i, (a, b) in enumerate(zip(got, want)):
      _compare_json(f'{where}[{i}]', a, b)
  elif isinstance(want, float) and not isinstance(want, bool):
    assert isinstance(got, float), f'{where}: {got!r} != pinned {want!r}'
    assert _close(got, want), f'{where}: {got!r} != pinned {want!r}'
  else:
    assert type(got) is type(want) and got == want, (
        f'{where}: {got!r} != pinned {want!r}')


def _compare_arrays(where, got: dict, want: dict):
  assert sorted(got) == sorted(want), (
      f'{where}: arrays {sorted(got)} != pinned {sorted(want)}')
  for name in want:
    a, b = got[name], want[name]
    assert a['dtype'] == b['dtype'], (
        f'{where}: array {name!r} dtype {a["dtype"]} != pinned {b["dtype"]}')
    if b['dtype'].startswith(('<U', '>U', '|S', 'object')):
      assert a['values'] == b['values'], f'{where}: array {name!r} differs'
    else:
      np.testing.assert_allclose(
          np.asarray(a['values'], dtype=np.float64),
          np.asarray(b['values'], dtype=np.float64), rtol=RTOL, atol=ATOL,
          err_msg=f'{where}: array {name!r}')


def compare(setting: str, got: dict, want: dict):
  """Asserts that `got` (collected) matches `want` (pinned), naming the spot."""
  assert got['files'] == want['files'], (
      f'{setting}: files written differ: new '
      f'{sorted(set(got["files"]) - set(want["files"]))}, missing '
      f'{sorted(set(want["files"]) - set(got["files"]))}')
  assert sorted(got) == sorted(want), (
      f'{setting}: pinned parts differ: new {sorted(set(got) - set(want))}, '
      f'missing {sorted(set(want) - set(got))}')
  for name, pinned_value in want.items():
    where = f'{setting}: {name}'
    if name == 'files':
      continue
    if name.endswith('.npz'):
      _compare_arrays(where, got[name], pinned_value)
    elif name.endswith('.json'):
      _compare_json(where, got[name], pinned_value)
    else:  # .csv, results.md
      _compare_table(where, got[name], pinned_value)


def test_every_setting_is_pinned(pinned):
  assert list(pinned) == list(pinned_runs.SETTINGS), (
      'tests/pinned_outputs.json does not hold exactly the settings of '
      'tests/pinned_runs.py; regenerate it (see the module docstring)')


@pytest.mark.parametrize('setting', list(pinned_runs.SETTINGS))
def test_short_run_writes_the_pinned_outputs(setting, pinned, tmp_path):
  """Run in this process: the claim is what the command writes, and the pins
  were written by it in a process of its own (`pinned_runs.main`)."""
  if setting in pinned_runs.DATA_TASKS:  # skips, naming it, when absent
    repository.task_data(pinned_runs.DATA_TASKS[setting])
  assert setting in pinned, f'{setting}: not in tests/pinned_outputs.json'
  assert pinned[setting]['flags'] == pinned_runs.SETTINGS[setting], (
      f'{setting}: the flags in tests/pinned_runs.py differ from the pinned '
      'ones; regenerate the pins (see the module docstring)')
  output_dir = str(tmp_path / 'out')
  pinned_runs.run(setting, output_dir, in_process=True)
  compare(setting, pinned_runs.collect(output_dir), pinned[setting]['outputs'])
