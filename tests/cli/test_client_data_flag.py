"""--client_data trains on a user's SqlClientData file; a file that is none,
has no clients or examples of another layout is one line naming the flag and
the file, with exit status 2."""

import os
import sqlite3

import pytest

from tff_hdp.tasks import client_data, population
from tests import repository

pytestmark = pytest.mark.tf


def _run(*flags, cwd=repository.ROOT):
  """run_experiment.py in this process (what it trains and prints is the
  claim); without --output_dir its folder is under `cwd`."""
  return repository.run_program('run_experiment.py', *flags, cwd=cwd)


def _one_line_error(done, *fragments):
  assert done.returncode == 2, done.stderr[-2000:]
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1, done.stderr[-2000:]
  for fragment in fragments:
    assert fragment in lines[0]


def test_a_short_run_on_a_client_data_file(tmp_path):
  path = population.cached_file(150, 0, str(tmp_path))
  out = str(tmp_path / 'out')
  done = _run(f'--client_data={path}', '--rounds=2', '--clients_per_round=10',
              '--eval_every=1', f'--output_dir={out}')
  assert done.returncode == 0, done.stderr[-2000:]
  assert os.path.basename(path) in done.stdout
  rounds = [os.path.join(out, d, 'rounds.csv') for d in os.listdir(out)
            if os.path.isfile(os.path.join(out, d, 'rounds.csv'))]
  assert rounds
  with open(rounds[0]) as f:
    assert f.read().count('\n') == 3  # a header and two rounds


def test_a_missing_file_and_a_task_are_refused_before_training(tmp_path):
  _one_line_error(_run(f'--client_data={tmp_path}/none.sqlite',
                       cwd=tmp_path),
                  '--client_data=', 'none.sqlite: no such file')
  path = population.cached_file(150, 0, str(tmp_path))
  _one_line_error(_run(f'--client_data={path}', '--task=digits',
                       cwd=tmp_path),
                  '--client_data replaces --task', 'drop --task')


@pytest.mark.parametrize('kind', ['text', 'other_tables', 'no_clients'])
def test_a_file_that_is_no_usable_client_data_is_one_line(tmp_path, kind):
  path = str(tmp_path / f'{kind}.sqlite')
  if kind == 'text':
    with open(path, 'w') as f:
      f.write('id,label\n' * 200)
    fragment = 'is not a TFF SqlClientData file'
  elif kind == 'other_tables':
    with sqlite3.connect(path) as con:
      con.execute('CREATE TABLE t (a)')
    fragment = "no 'examples' and 'client_metadata' tables"
  else:
    client_data.write_sql(path, [])
    fragment = "has no clients with 'train' examples"
  _one_line_error(_run(f'--client_data={path}', '--rounds=1', cwd=tmp_path),
                  '--client_data:', f'{kind}.sqlite', fragment)
