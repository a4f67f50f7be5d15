"""Short, deterministic CLI runs whose outputs tests/test_pinned_outputs.py pins.

SETTINGS holds, for each setting (trusted server, trusted with Ditto and
cohorts, untrusted server, cross-silo, point estimation), the flags of a short
`run_experiment.py` run. Every learning run passes
--unsafe_seeded_dp_randomness, so that the DP noise and the sampling follow
--seed instead of a secret OS-entropy seed and the run repeats exactly.

`collect(output_dir)` reads what a run wrote into a JSON-serializable dict:
  files: every file the run wrote (relative paths; names only);
  each .csv (results.csv, sweep_*.csv, <config>/rounds.csv): its columns and
    rows as strings, without the columns whose name contains 'seconds' (wall
    time);
  results.md: the caption above the table and the table's cells, without the
    seconds column;
  each .json except checkpoints' run_key.json (i.e. every summary.json),
    without the keys named 'seconds', at any depth;
  each .npz (final_model.npz, checkpoints/personal_round_<k>.npz): per array
    its dtype and values as nested lists; float32 values are written in their
    shortest decimal form that reads back to the same float32 (lossless, about
    half the size of the float64 repr).
Not pinned (listed under `files` only): PNG plots, TensorBoard event files
(listed as `events.out.tfevents.*`: their names hold the time and host),
TensorFlow checkpoint files, run_key.json, dp_secret_seed and seconds.json
(wall time).

Regenerate tests/pinned_outputs.json (all settings, ~4 minutes) with
  .venv/bin/python tests/pinned_runs.py
only when an output change is intended, and say so in the commit.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PINNED_FILE = os.path.join(ROOT, 'tests', 'pinned_outputs.json')
# The Vehicle data, under the data sets' one setting (tasks.data_files).
sys.path.insert(0, ROOT)
from tff_hdp import tasks  # noqa: E402  pylint: disable=g-import-not-at-top
VEHICLE_DIR = tasks.REGISTRY['vehicle'].default_data_dir()
VEHICLE_PLACEHOLDER = '{vehicle_dir}'

_TRUSTED = [
    '--task=digits', '--algorithms=nonprivate,dp_fedavg,fedhdp', '--r=0.1,1',
    '--rounds=3', '--clients_per_round=20', '--clip_count_stddev=2',
    '--eval_every=1', '--checkpoint_every=0',
    '--unsafe_seeded_dp_randomness', '--release_unprotected_stats',
]

# Flags of each setting; VEHICLE_PLACEHOLDER stands for VEHICLE_DIR.
SETTINGS: dict[str, list[str]] = {
    'trusted': _TRUSTED,
    'trusted_ditto_cohorts': [
        '--task=digits', '--algorithms=fedhdp', '--r=0.5',
        '--ditto_lambda_p=0.1', '--ditto_lambda_np=0.05', '--cohort_size=8',
        '--rounds=3', '--clients_per_round=20', '--clip_count_stddev=2',
        '--eval_every=1', '--checkpoint_every=3',
        '--unsafe_seeded_dp_randomness', '--release_unprotected_stats',
    ],
    'untrusted': [
        '--task=digits', '--num_clients=10',
        '--algorithms=robust_hdp,weiavg,pfa,dpfedavg', '--rounds=2',
        '--eval_every=1', '--epsilon_distribution=uniform',
        '--checkpoint_every=0', '--unsafe_seeded_dp_randomness',
    ],
    'cross_silo': [
        '--task=vehicle', f'--data_dir={VEHICLE_PLACEHOLDER}',
        '--algorithms=local,mrmtl,ifca', '--lambdas=0.1,1', '--rounds=2',
        '--epsilons=1', '--deltas=1e-3', '--dp_sgd_clip=6', '--batch_size=64',
        '--eval_every=1', '--num_clusters=2', '--checkpoint_every=0',
        '--unsafe_seeded_dp_randomness',
    ],
    'point_estimation': [
        '--task=point_estimation', '--trials=2000', '--r=0.5,1',
        '--checkpoint_every=0', '--unsafe_seeded_dp_randomness',
    ],
}

# Settings that need data outside the repository: setting -> the task.
DATA_TASKS = {'cross_silo': 'vehicle'}

# Written, but only their names are pinned (secret or not user output).
_UNPINNED_NAMES = ('run_key.json', 'dp_secret_seed', 'seconds.json')


def flags(setting: str, output_dir: str,
          extra_flags: tuple[str, ...] = ()) -> list[str]:
  """The flags of `setting` (with `extra_flags` after its own), writing into
  `output_dir`."""
  return [*(f.replace(VEHICLE_PLACEHOLDER, VEHICLE_DIR)
            for f in SETTINGS[setting]), *extra_flags,
          f'--output_dir={output_dir}']


def command(setting: str, output_dir: str,
            extra_flags: tuple[str, ...] = ()) -> list[str]:
  """The command line of `setting`, writing into `output_dir`."""
  return [sys.executable, os.path.join(ROOT, 'run_experiment.py'),
          *flags(setting, output_dir, extra_flags)]


def run(setting: str, output_dir: str, extra_flags: tuple[str, ...] = (),
        in_process: bool = False) -> subprocess.CompletedProcess:
  """Runs `setting` into `output_dir` (with `extra_flags` after its own);
  raises with stderr's end if it fails.

  `in_process`: in this (test) process (`repository.run_program`), about 8 s
  less a run; the outputs are the same, and the pins are written by the
  command in a process of its own (`main`), so the tests that compare with
  them also check that running here changes nothing.
  """
  if in_process:
    from tests import repository  # pylint: disable=g-import-not-at-top
    result = repository.run_program('run_experiment.py',
                                    *flags(setting, output_dir, extra_flags))
  else:
    result = subprocess.run(
        command(setting, output_dir, extra_flags), cwd=ROOT,
        env=dict(os.environ, MPLBACKEND='Agg'), capture_output=True,
        text=True, timeout=900)
  if result.returncode != 0:
    raise RuntimeError(f'{setting}: run_experiment.py exited with '
                       f'{result.returncode}:\n{result.stderr[-3000:]}')
  return result


def _is_seconds(name: str) -> bool:
  return 'seconds' in name


def _read_csv(path: str) -> dict:
  with open(path, newline='') as f:
    rows = list(csv.reader(f))
  header = rows[0] if rows else []
  keep = [i for i, name in enumerate(header) if not _is_seconds(name)]
  return {'columns': [header[i] for i in keep],
          'rows': [[row[i] for i in keep] for row in rows[1:]]}


def _markdown_cells(line: str) -> list[str]:
  return [c.strip() for c in line.strip()[1:-1].split('|')]


def _read_results_md(path: str) -> dict:
  """Caption lines and table cells of results.md, seconds column dropped."""
  with open(path) as f:
    lines = f.read().splitlines()
  table = [i for i, line in enumerate(lines) if line.startswith('|')]
  caption = lines[:table[0]] if table else lines
  cells = [_markdown_cells(lines[i]) for i in table]
  if cells:
    del cells[1]  # the |---|---| line
  header = cells[0] if cells else []
  keep = [i for i, name in enumerate(header) if not _is_seconds(name)]
  return {'caption': caption,
          'columns': [header[i] for i in keep],
          'rows': [[row[i] for i in keep] for row in cells[1:]],
          'after_table': lines[table[-1] + 1:] if table else []}


def _drop_seconds(value):
  if isinstance(value, dict):
    return {k: _drop_seconds(v) for k, v in value.items() if k != 'seconds'}
  if isinstance(value, list):
    return [_drop_seconds(v) for v in value]
  return value


def _array_values(array: np.ndarray):
  if array.dtype == np.float32:
    # Shortest decimal that reads back as the same float32.
    flat = [float(str(v)) for v in array.ravel()]
    return np.array(flat, dtype=np.float64).reshape(array.shape).tolist()
  return array.tolist()


def _read_npz(path: str) -> dict:
  with np.load(path, allow_pickle=False) as archive:
    return {name: {'dtype': str(archive[name].dtype),
                   'values': _array_values(archive[name])}
            for name in sorted(archive.files)}


_EVENTS = 'events.out.tfevents.'


def collect(output_dir: str) -> dict:
  """Everything a user sees of the run in `output_dir` (see module doc)."""
  files = []
  for dirpath, _, names in os.walk(output_dir):
    for name in names:
      if name.startswith(_EVENTS):  # named by the time and host
        name = _EVENTS + '*'
      files.append(os.path.relpath(os.path.join(dirpath, name),
                                   output_dir).replace(os.sep, '/'))
  files.sort()
  collected = {'files': files}
  for rel in files:
    path = os.path.join(output_dir, rel)
    base = rel.rsplit('/', 1)[-1]
    if base in _UNPINNED_NAMES:
      continue
    if rel.endswith('.csv'):
      collected[rel] = _read_csv(path)
    elif base == 'results.md':
      collected[rel] = _read_results_md(path)
    elif rel.endswith('.json'):
      with open(path) as f:
        collected[rel] = _drop_seconds(json.load(f))
    elif rel.endswith('.npz'):
      collected[rel] = _read_npz(path)
  return collected


def run_and_collect(setting: str) -> dict:
  with tempfile.TemporaryDirectory(prefix=f'pinned_{setting}_') as tmp:
    output_dir = os.path.join(tmp, 'out')
    run(setting, output_dir)
    return collect(output_dir)


def _is_scalar(value) -> bool:
  return not isinstance(value, (dict, list))


def dumps(value, indent: int = 0) -> str:
  """JSON with one line per list of scalars (a model row), small and diffable."""
  pad, inner = ' ' * indent, ' ' * (indent + 1)
  if isinstance(value, dict):
    if not value:
      return '{}'
    items = [f'{inner}{json.dumps(k)}: {dumps(v, indent + 1)}'
             for k, v in value.items()]
    return '{\n' + ',\n'.join(items) + '\n' + pad + '}'
  if isinstance(value, list):
    if all(_is_scalar(v) for v in value):
      return json.dumps(value)
    return ('[\n' + ',\n'.join(inner + dumps(v, indent + 1) for v in value) +
            '\n' + pad + ']')
  return json.dumps(value)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('settings', nargs='*', help='default: all, in order')
  parser.add_argument('--out', default=PINNED_FILE,
                      help='JSON to write (default: %(default)s)')
  args = parser.parse_args(argv)
  names = args.settings or list(SETTINGS)
  for name in names:
    if name not in SETTINGS:
      parser.error(f'unknown setting {name!r}; choose from {list(SETTINGS)}')
    data_dir = (tasks.REGISTRY[DATA_TASKS[name]].default_data_dir()
                if name in DATA_TASKS else None)
    if data_dir and not os.path.isdir(data_dir):
      sys.exit(f'{name}: data directory {data_dir} does not exist.')
  pinned = {}
  if args.settings and os.path.exists(args.out):
    with open(args.out) as f:
      pinned = json.load(f)  # update only the settings named
  for name in names:
    print(f'{name}: running {" ".join(SETTINGS[name])}', flush=True)
    pinned[name] = {'flags': SETTINGS[name], 'outputs': run_and_collect(name)}
    outputs = pinned[name]['outputs']
    print(f'{name}: {len(outputs["files"])} files written, pinned: '
          f'{", ".join(k for k in outputs if k != "files")}', flush=True)
  pinned = {k: pinned[k] for k in SETTINGS if k in pinned}
  with open(args.out, 'w') as f:
    f.write(dumps(pinned) + '\n')
  print(f'Wrote {args.out} ({os.path.getsize(args.out)} bytes): '
        f'{", ".join(names)}')


if __name__ == '__main__':
  main()
