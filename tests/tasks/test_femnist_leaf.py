"""FEMNIST from LEAF JSON shards: the real 105-writer sample and small files."""

import gzip
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tff_hdp import tasks
from tff_hdp.tasks import data_files
from tff_hdp.tasks import femnist_leaf
from tff_hdp.federated_task import TaskOptions
from tests import repository

pytestmark = pytest.mark.tf



def _leaf_dir():
  return repository.task_data('femnist_leaf')


def test_real_sample_has_105_writers_and_62_classes():
  task = tasks.load('femnist_leaf', TaskOptions(data_dir=_leaf_dir()))
  assert len(task.client_ids) == 105 and task.dropped_clients == 0
  assert sum(len(y) for _, y in task.client_train.values()) == 14708
  assert sum(len(y) for _, y in task.client_test.values()) == 1685
  x_server, y_server = task.server_test
  assert x_server.shape == (1685, 784) and x_server.dtype == np.float32
  labels = np.concatenate([y for _, y in task.client_train.values()])
  assert labels.dtype == np.int32 and labels.min() == 0 and labels.max() == 61
  # Writers differ: label histograms are far from one another (non-IID).
  hists = [np.bincount(y, minlength=62) / len(y)
           for _, y in task.client_train.values()]
  assert max(np.abs(h - hists[0]).sum() for h in hists) > 0.3
  model = task.keras_model_fn()
  assert model(x_server[:3]).shape == (3, 62)
  assert any(isinstance(l, tf.keras.layers.Conv2D) for l in model.layers)


def test_num_clients_is_a_seeded_subset():
  a = femnist_leaf.load(_leaf_dir(), num_clients=10, seed=4)
  b = femnist_leaf.load(_leaf_dir(), num_clients=10, seed=4)
  assert len(a.client_ids) == 10 and a.client_ids == b.client_ids


def _shard(users):
  return {'users': list(users), 'num_samples': [len(y) for _, y in
                                                users.values()],
          'user_data': {u: {'x': np.asarray(x).tolist(), 'y': list(y)}
                        for u, (x, y) in users.items()}}


def _write(path, data):
  opener = gzip.open if path.endswith('.gz') else open
  with opener(path, 'wt') as f:
    json.dump(data, f)


def _pixels(n, value):
  return np.full((n, 784), value)


@pytest.fixture
def leaf_dir(tmp_path):
  for split in ('train', 'test'):
    os.mkdir(tmp_path / split)
  _write(str(tmp_path / 'train' / 'a.json'), _shard({
      'u0': (_pixels(3, 0.5), [1, 2, 61]), 'u1': (_pixels(0, 0), [])}))
  _write(str(tmp_path / 'train' / 'b.json.gz'), _shard({
      'u2': (_pixels(2, 0.25), [7, 7]), 'u3': (_pixels(1, 1.0), [0])}))
  _write(str(tmp_path / 'test' / 'a.json'), _shard({
      'u0': (_pixels(1, 0.5), [4]), 'u1': (_pixels(1, 0), [5])}))
  _write(str(tmp_path / 'test' / 'b.json.gz'), _shard({
      'u2': (_pixels(1, 0.25), [9])}))
  return tmp_path


def test_plain_and_gzipped_shards_and_dropped_writers(leaf_dir):
  task = femnist_leaf.load(str(leaf_dir))
  # u1 has no training examples, u3 no test examples.
  assert sorted(task.client_ids) == ['u0', 'u2'] and task.dropped_clients == 2
  x, y = task.client_train['u0']
  assert x.shape == (3, 784) and y.tolist() == [1, 2, 61]
  assert sorted(task.server_test[1].tolist()) == [4, 9]


def test_malformed_shards_are_named(leaf_dir):
  bad = leaf_dir / 'train' / 'c.json'
  bad.write_text('{"users": [')
  with pytest.raises(ValueError, match='cannot read LEAF JSON file .*c.json'):
    femnist_leaf.load(str(leaf_dir))
  _write(str(bad), {'users': ['u9']})
  with pytest.raises(ValueError, match='c.json is not LEAF JSON'):
    femnist_leaf.load(str(leaf_dir))
  _write(str(bad), {'users': ['u9'], 'user_data': {'u9': {'x': [[0.0] * 784],
                                                          'y': [1, 2]}}})
  with pytest.raises(ValueError, match="c.json: user 'u9' has 1 examples but "
                     '2 labels'):
    femnist_leaf.load(str(leaf_dir))
  _write(str(bad), _shard({'u9': (np.zeros((1, 5)), [1])}))
  with pytest.raises(ValueError, match="writer 'u9' has 5 features"):
    femnist_leaf.load(str(leaf_dir))
  _write(str(bad), _shard({'u9': (_pixels(1, 0), [62])}))
  with pytest.raises(ValueError, match=r"writer 'u9': 1 labels outside the classes 0-61"):
    femnist_leaf.load(str(leaf_dir))
  _write(str(bad), _shard({'u0': (_pixels(1, 0), [1])}))
  with pytest.raises(ValueError, match="c.json: user 'u0' already appeared"):
    femnist_leaf.load(str(leaf_dir))


def test_missing_folders_and_directory(tmp_path):
  with pytest.raises(ValueError, match='train holds no LEAF JSON shards'):
    femnist_leaf.load(str(tmp_path))
  with pytest.raises(ValueError, match='--data_dir=DIR where DIR holds LEAF '
                     'FEMNIST folders'):
    tasks.load('femnist_leaf', TaskOptions())
  with pytest.raises(ValueError, match='cannot read LEAF JSON file'):
    data_files.read_leaf_json(str(tmp_path / 'absent.json'))
