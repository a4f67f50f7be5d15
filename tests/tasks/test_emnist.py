"""Federated EMNIST through TFF's real loader, on a tiny database in its format.

TFF 0.87 reads federated EMNIST from one SQLite file, `emnist_all.sqlite`, in
its cache directory (tables `examples` and `client_metadata`, serialized
`tf.train.Example`s with 28x28 `pixels` and a `label`). The tests write such
a file with a few writers, so nothing is downloaded.
"""

import os
import sqlite3

import numpy as np
import pytest
import tensorflow as tf

from tff_hdp import tasks
from tff_hdp.tasks import emnist
from tff_hdp.federated_task import TaskOptions

pytestmark = pytest.mark.tf


def _example(pixels: np.ndarray, label: int) -> bytes:
  return tf.train.Example(features=tf.train.Features(feature={
      'pixels': tf.train.Feature(
          float_list=tf.train.FloatList(value=pixels.ravel().tolist())),
      'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
  })).SerializeToString()


def write_database(directory, splits):
  """`splits[split_name][client_id] = labels`; pixels encode the label."""
  connection = sqlite3.connect(os.path.join(directory, emnist.SQLITE_FILE))
  connection.execute('CREATE TABLE examples (split_name TEXT, client_id TEXT, '
                     'serialized_example_proto BLOB)')
  connection.execute('CREATE TABLE client_metadata (client_id TEXT, '
                     'split_name TEXT, num_examples INTEGER)')
  for split, clients in splits.items():
    for client, labels in clients.items():
      for label in labels:
        pixels = np.full((28, 28), label / 100.0, np.float32)
        connection.execute('INSERT INTO examples VALUES (?, ?, ?)',
                           (split, client, _example(pixels, label)))
      connection.execute('INSERT INTO client_metadata VALUES (?, ?, ?)',
                         (client, split, len(labels)))
  connection.commit()
  connection.close()


@pytest.fixture
def cache_dir(tmp_path):
  write_database(tmp_path, {
      'digits_only_train': {'w0': [0, 1, 2], 'w1': [3, 3], 'w2': [9],
                            'w3': [4]},
      'digits_only_test': {'w0': [5], 'w1': [6, 7], 'w2': [8]},
      'all_train': {'w0': [0, 61, 35], 'w1': [10], 'w4': [20, 21]},
      'all_test': {'w0': [36], 'w1': [60], 'w4': [1]},
  })
  return str(tmp_path)


def test_digits_only_clients_arrays_and_model(cache_dir):
  task = tasks.load('fmnist', TaskOptions(data_dir=cache_dir))
  assert task.name == 'fmnist'
  # w3 has no test examples: dropped and counted.
  assert task.client_ids == ['w0', 'w1', 'w2'] and task.dropped_clients == 1
  x, y = task.client_train['w0']
  assert x.shape == (3, 784) and x.dtype == np.float32 and y.dtype == np.int32
  assert sorted(y.tolist()) == [0, 1, 2]
  np.testing.assert_allclose(x[:, 0], y / 100.0, rtol=1e-6)
  assert task.client_test['w1'][1].tolist() == [6, 7]
  x_server, y_server = task.server_test
  assert sorted(y_server.tolist()) == [5, 6, 7, 8] and len(x_server) == 4
  model = task.keras_model_fn()
  assert model(x_server).shape == (4, 10)
  assert [l.units for l in model.layers] == [200, 10]  # the 1-layer NN


def test_full_emnist_uses_62_classes_and_the_cnn(cache_dir):
  task = tasks.load('femnist', TaskOptions(data_dir=cache_dir))
  assert task.client_ids == ['w0', 'w1', 'w4'] and task.dropped_clients == 0
  assert sorted(task.client_train['w0'][1].tolist()) == [0, 35, 61]
  model = task.keras_model_fn()
  assert model(task.server_test[0]).shape == (3, 62)
  assert any(isinstance(l, tf.keras.layers.Conv2D) for l in model.layers)


def test_num_clients_picks_a_seeded_subset(cache_dir):
  first = emnist.load(cache_dir, only_digits=False, num_clients=2, seed=1)
  again = emnist.load(cache_dir, only_digits=False, num_clients=2, seed=1)
  assert len(first.client_ids) == 2 and first.client_ids == again.client_ids
  with pytest.raises(ValueError, match=r'--num_clients must be in \[1, 3\]'):
    emnist.load(cache_dir, only_digits=False, num_clients=7)


def test_missing_database_is_an_error_not_a_download(tmp_path):
  with pytest.raises(ValueError, match='emnist_all.sqlite does not exist'):
    emnist.load(str(tmp_path), only_digits=True)
  with pytest.raises(ValueError, match='pass --data_dir=DIR where DIR holds '
                     'emnist_all.sqlite'):
    tasks.load('femnist', TaskOptions())
  assert os.listdir(tmp_path) == []


def test_malformed_database_is_named(tmp_path):
  sqlite3.connect(os.path.join(tmp_path, emnist.SQLITE_FILE)).execute(
      'CREATE TABLE other (a TEXT)')
  with pytest.raises(ValueError, match='emnist_all.sqlite: .*does not have '
                     'the required'):
    emnist.load(str(tmp_path), only_digits=True)
