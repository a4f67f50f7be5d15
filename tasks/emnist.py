"""Federated EMNIST from TFF: FeO2's "FMNIST" (digits) and FEMNIST (62 classes).

The data come through TFF's own loader, `tff.simulation.datasets.emnist.
load_data`, so the clients are exactly TFF's writers (3,383 digits-only, 3,400
in all) with TFF's per-writer train/test split. TFF 0.87 keeps them in one
SQLite file, `emnist_all.sqlite`, in its cache directory; this loader passes
`--data_dir` as that directory and refuses to start a download (the machines
this runs on have no network), so a missing file is a clear error instead.
Clients' datasets are read once into numpy arrays for the `FederatedTask`.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.tasks import client_arrays
from tff_hdp.tasks import data_files
from tff_hdp.tasks import models
from tff_hdp.federated_task import Arrays
from tff_hdp.federated_task import FederatedTask
from tff_hdp.federated_task import TaskOptions

SQLITE_FILE = 'emnist_all.sqlite'
_SOURCE = ('https://storage.googleapis.com/tff-datasets-public/'
           'emnist_all.sqlite.lzma')


def _arrays(client_data, client_id: str) -> Arrays:
  """One client's examples as flat float32 pixels and int32 labels."""
  xs, ys = [], []
  for batch in client_data.create_tf_dataset_for_client(client_id).batch(
      4096):
    xs.append(batch['pixels'].numpy().reshape(-1, models.IMAGE_PIXELS))
    ys.append(batch['label'].numpy())
  if not xs:
    return (np.zeros((0, models.IMAGE_PIXELS), np.float32),
            np.zeros((0,), np.int32))
  return (np.concatenate(xs).astype(np.float32),
          np.concatenate(ys).astype(np.int32))


def load(data_dir: str | None, only_digits: bool,
         num_clients: int | None = None, batch_size: int = 10,
         seed: int = 0) -> FederatedTask:
  """TFF's federated EMNIST; `num_clients` picks a seeded subset of writers.

  Digits-only trains FeO2's 1-layer NN, the 62-class version its 2-layer
  CNN. The server test set is the union of the clients' test sets (FeO2
  Appendix C).
  """
  what = (f'{SQLITE_FILE}, TFF\'s federated EMNIST database (decompress '
          f'{_SOURCE} into it, or point at an existing TFF cache such as '
          '~/.tff)')
  data_dir = data_files.require_dir(data_dir, what)
  if not os.path.exists(os.path.join(data_dir, SQLITE_FILE)):
    raise ValueError(f'{os.path.join(data_dir, SQLITE_FILE)} does not exist; '
                     f'{data_dir} must hold {what}.')
  try:
    train_data, test_data = tff.simulation.datasets.emnist.load_data(
        only_digits=only_digits, cache_dir=data_dir)
  except tff.simulation.datasets.sql_client_data.DatabaseFormatError as e:
    raise ValueError(f'{os.path.join(data_dir, SQLITE_FILE)}: {e}') from None
  ids = client_arrays.subset(
      sorted(set(train_data.client_ids) | set(test_data.client_ids)),
      num_clients, seed)
  train_ids, test_ids = set(train_data.client_ids), set(test_data.client_ids)
  train = {c: _arrays(train_data, c) for c in ids if c in train_ids}
  test = {c: _arrays(test_data, c) for c in ids if c in test_ids}
  name = 'fmnist' if only_digits else 'femnist'
  num_classes = 10 if only_digits else 62
  for split, clients in (('train', train), ('test', test)):
    for c, (_, y) in clients.items():
      data_files.check_labels(
          y, num_classes, f'{os.path.join(data_dir, SQLITE_FILE)}: {name} '
          f'{split} writer {c!r}')
  train, test, dropped = client_arrays.drop_empty(name, train, test)
  model_fn = ((lambda: models.one_layer_nn(models.IMAGE_PIXELS,
                                            num_classes))
              if only_digits else (lambda: models.feo2_cnn(num_classes)))
  return FederatedTask(
      name=name,
      client_train=train,
      client_test=test,
      server_test=client_arrays.pooled(test),
      keras_model_fn=model_fn,
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(
          from_logits=True),
      batch_size=batch_size,
      dropped_clients=dropped)


def load_digits_task(options: TaskOptions) -> FederatedTask:
  return load(options.data_dir, only_digits=True,
              num_clients=options.num_clients, batch_size=options.batch_size,
              seed=options.seed)


def load_full_task(options: TaskOptions) -> FederatedTask:
  return load(options.data_dir, only_digits=False,
              num_clients=options.num_clients, batch_size=options.batch_size,
              seed=options.seed)
