"""FEMNIST in LEAF's own JSON format: one client per writer, 62 classes.

LEAF's preprocessing scripts write `train/` and `test/` folders of JSON
shards (plain or gzipped); this reads them directly, so a LEAF sample (such as
the 105 writers kept in the shared data folder) runs without TFF's database.
The model is FeO2's 2-layer CNN for FEMNIST and the server test set is the
union of the writers' test sets, as in FeO2.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from tff_hdp.tasks import client_arrays
from tff_hdp.tasks import data_files
from tff_hdp.tasks import models
from tff_hdp.federated_task import FederatedTask
from tff_hdp.federated_task import TaskOptions

NUM_CLASSES = 62


def _check_writers(path: str, clients: dict) -> None:
  """Every non-empty writer has 784 pixels and labels in [0, 62)."""
  for user, (x, y) in clients.items():
    if not len(y):
      continue
    if x.shape[1] != models.IMAGE_PIXELS:
      raise ValueError(f'{path}: writer {user!r} has {x.shape[1]} features per '
                       f'example; FEMNIST needs {models.IMAGE_PIXELS} pixels.')
    data_files.check_labels(y, NUM_CLASSES, f'{path}: writer {user!r}')


def load(data_dir: str | None, num_clients: int | None = None,
         batch_size: int = 10, seed: int = 0) -> FederatedTask:
  """Writers of `data_dir/{train,test}/*.json[.gz]`, or a seeded subset."""
  data_dir = data_files.require_dir(
      data_dir, 'LEAF FEMNIST folders train/ and test/ of *.json or '
      '*.json.gz shards')
  train_all, test_all = (data_files.read_leaf_dir(os.path.join(data_dir, split))
                         for split in ('train', 'test'))
  for split, clients in (('train', train_all), ('test', test_all)):
    _check_writers(os.path.join(data_dir, split), clients)
  keep = set(client_arrays.subset(sorted(train_all), num_clients, seed))
  train = {c: (x, y.astype(np.int32)) for c, (x, y) in train_all.items()
           if c in keep}
  test = {c: (x, y.astype(np.int32)) for c, (x, y) in test_all.items()
          if c in keep}
  train, test, dropped = client_arrays.drop_empty('femnist_leaf', train, test)
  return FederatedTask(
      name='femnist_leaf',
      client_train=train,
      client_test=test,
      server_test=client_arrays.pooled(test),
      keras_model_fn=lambda: models.feo2_cnn(NUM_CLASSES),
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(
          from_logits=True),
      batch_size=batch_size,
      dropped_clients=dropped)


def load_task(options: TaskOptions) -> FederatedTask:
  return load(options.data_dir, options.num_clients,
              batch_size=options.batch_size, seed=options.seed)
