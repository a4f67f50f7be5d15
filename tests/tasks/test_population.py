"""The synthetic population file: reproducible from its seed, in TFF's schema,
and read back by TFF's own reader as the arrays it was generated from."""

import os
import sqlite3

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.tasks import client_data, population
from tests import repository

pytestmark = pytest.mark.tf

N = 300


def test_the_file_is_reproducible_from_its_seed(tmp_path):
  paths = [str(tmp_path / f'{name}.sqlite') for name in ('a', 'b', 'c')]
  population.write(paths[0], N, seed=0)
  population.write(paths[1], N, seed=0)
  population.write(paths[2], N, seed=1)
  a, b, c = map(client_data.file_fingerprint, paths)
  assert a == b
  assert a != c


def test_cached_file_is_keyed_by_clients_and_seed(tmp_path):
  first = population.cached_file(N, 0, str(tmp_path))
  assert population.cached_file(N, 0, str(tmp_path)) == first
  assert population.cached_file(N, 1, str(tmp_path)) != first
  assert population.cached_file(N // 2, 0, str(tmp_path)) != first


def test_rows_are_the_serialized_example_protos():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(4, population.NUM_FEATURES)).astype(np.float32)
  y = np.array([0, 3, 9, 127])
  rows = client_data.example_rows(x, y)
  for row, xi, yi in zip(rows, x, y):
    expected = tf.train.Example(features=tf.train.Features(feature={
        'x': tf.train.Feature(float_list=tf.train.FloatList(value=xi)),
        'y': tf.train.Feature(int64_list=tf.train.Int64List(value=[yi])),
    }))
    assert tf.train.Example.FromString(row.tobytes()) == expected


def test_tff_reads_back_the_generated_arrays(tmp_path):
  path = population.cached_file(N, 0, str(tmp_path))
  train, test, _ = population.generate_arrays(N, 0)
  spec = {'x': tf.TensorSpec([population.NUM_FEATURES], tf.float32),
          'y': tf.TensorSpec([], tf.int64)}
  for split, arrays in (('train', train), ('test', test)):
    data = tff.simulation.datasets.load_and_parse_sql_client_data(
        path, spec, split)
    assert data.client_ids == sorted(arrays)
    for c in ('0000000', '0000123', f'{N - 1:07d}'):
      read = list(data.create_tf_dataset_for_client(c).as_numpy_iterator())
      np.testing.assert_array_equal(np.stack([e['x'] for e in read]),
                                    arrays[c][0])
      np.testing.assert_array_equal([e['y'] for e in read], arrays[c][1])


def test_clients_are_non_iid_and_small():
  train, test, server = population.generate_arrays(N, 0)
  sizes = np.array([len(y) for _, y in train.values()])
  assert sizes.min() >= 5 and sizes.max() <= 20
  assert all(1 <= len(y) <= 4 for _, y in test.values())
  # Each client's label mix is its own Dirichlet(0.5) draw: far from uniform.
  majority = np.mean([np.bincount(y).max() / len(y) for _, y in train.values()])
  assert majority > 0.4
  assert len(np.unique(server[1])) == population.NUM_CLASSES


def _population_run(tmp_path):
  """A population run in this process: its one error line."""
  result = repository.run_program(
      'run_experiment.py', '--task=population', '--num_clients=20',
      '--rounds=1', '--clients_per_round=5', f'--output_dir={tmp_path}/out')
  assert result.returncode == 2, result.stderr[-2000:]
  assert 'Traceback' not in result.stderr
  return result.stderr.strip().splitlines()


@pytest.mark.parametrize('under', ['', 'cache'])
def test_a_cache_that_cannot_be_made_names_it_and_the_variable(
    tmp_path, monkeypatch, under):
  """'<path>: Not a directory' (as root a chmod stops nothing: the cache is
  a file, or a folder under one), naming neither, before."""
  (tmp_path / 'a_file').write_text('')
  cache = os.path.join(tmp_path / 'a_file', under) if under else str(
      tmp_path / 'a_file')
  monkeypatch.setenv('TFF_HDP_CACHE', cache)
  reason = 'Not a directory' if under else 'it is a file, not a folder'
  assert _population_run(tmp_path) == [
      'run_experiment.py: error: --task=population: the task cache '
      f'$TFF_HDP_CACHE={cache} cannot be written ({reason}); set '
      '$TFF_HDP_CACHE to a writable folder with free space.']


def test_a_full_disk_while_writing_the_cache_is_one_line(tmp_path,
                                                         monkeypatch):
  """SQLite's full disk was a 34-line traceback."""
  def full(*args):
    raise sqlite3.OperationalError('database or disk is full')
  monkeypatch.setattr(client_data, 'example_rows', full)
  monkeypatch.setenv('TFF_HDP_CACHE', str(tmp_path / 'cache'))
  assert _population_run(tmp_path) == [
      'run_experiment.py: error: --task=population: the task cache '
      f'$TFF_HDP_CACHE={tmp_path}/cache cannot be written (database or disk '
      'is full); set $TFF_HDP_CACHE to a writable folder with free space.']
  assert os.listdir(tmp_path / 'cache') == []  # no half-written file
