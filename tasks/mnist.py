"""MNIST tasks: FeO2's non-IID split (every client holds one digit, or one
Fashion-MNIST class) and an IID split of MNIST or Fashion-MNIST for the
untrusted-server experiments.

FeO2 (SPEC.md §1) splits MNIST into 2,000 clients of equal size, each with
images of a single digit, and scores the global model on the MNIST test set.
Its skewed variant draws the opt-out clients only from the digit-7 holders,
so the non-private group sees one class: the task says so through
`opt_out_pool`.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tff_hdp.tasks import client_arrays
from tff_hdp.tasks import data_files
from tff_hdp.tasks import models
from tff_hdp.federated_task import FederatedTask
from tff_hdp.federated_task import TaskOptions

NUM_CLIENTS = 2000
IID_CLIENTS = 20
SKEWED_DIGIT = 7


def flat_images(x: np.ndarray) -> np.ndarray:
  """N x 28 x 28 images (`read_mnist`'s) as float32 N x 784 in [0, 1]."""
  return data_files.unit_pixels(x.reshape(len(x), -1))


def load(data_dir: str | None, num_clients: int = NUM_CLIENTS,
         skewed: bool = False, client_test_fraction: float = 0.2,
         batch_size: int = 10, seed: int = 0,
         dataset: str = 'mnist') -> FederatedTask:
  """`num_clients` single-label clients (a multiple of 10), equal sizes.

  Each client gets as many training images as the rarest label allows
  (27 at 2,000 clients on MNIST, 30 on Fashion-MNIST) and keeps
  `client_test_fraction` of them as its local test set. Fashion-MNIST's
  split is the same construction on its ten classes (FeO2 split MNIST only),
  so a privacy choice that follows the label can be tried on a second data
  set; its client ids keep the `digit<label>_` prefix the label rules read.
  """
  label = DATASETS[dataset]
  if num_clients < 10 or num_clients % 10:
    raise ValueError(f'--num_clients: non-IID {label} needs a positive '
                     f'multiple of 10 clients, got {num_clients}.')
  x_train, y_train, x_test, y_test = data_files.read_mnist(data_dir, label)
  per_digit = num_clients // 10
  rng = np.random.default_rng(seed)
  by_digit = [rng.permutation(np.flatnonzero(y_train == d)) for d in range(10)]
  per_client = min(len(idx) for idx in by_digit) // per_digit
  if per_client < 2:
    raise ValueError(f'--num_clients={num_clients} leaves fewer than 2 '
                     f'{label} images per client.')
  x = flat_images(x_train)
  y = y_train.astype(np.int32)
  train, test = {}, {}
  for digit, idx in enumerate(by_digit):
    for k in range(per_digit):
      part = idx[k * per_client:(k + 1) * per_client]
      cid = f'digit{digit}_client{k}'
      train[cid], test[cid] = client_arrays.split(
          x[part], y[part], client_test_fraction, rng)
  name = f'{dataset}_noniid_skewed' if skewed else f'{dataset}_noniid'
  return _task(name, train, test, x_test, y_test, batch_size,
               opt_out_pool=([c for c in train
                              if c.startswith(f'digit{SKEWED_DIGIT}_')]
                             if skewed else None))


# Data sets by task name prefix: the name errors give each.
DATASETS = {'mnist': 'MNIST', 'fashion_mnist': 'Fashion-MNIST'}


def load_iid(data_dir: str | None, num_clients: int = IID_CLIENTS,
             client_test_fraction: float = 0.2, batch_size: int = 10,
             seed: int = 0, dataset: str = 'mnist') -> FederatedTask:
  """MNIST's (or Fashion-MNIST's) training images in `num_clients` equal
  shards.

  The Robust-HDP experiments' setting (SPEC.md §3: 20 clients, all in every
  round, each keeping a fifth of its shard as its test set, so 2,400 training
  images each as in the authors' code): clients differ in privacy budget and
  batch size, not in label distribution, so the aggregation weights decide how
  much noise the model gets, not which classes it sees.
  """
  label = DATASETS[dataset]
  if num_clients < 1:
    raise ValueError(f'--num_clients: IID {label} needs at least 1 client, '
                     f'got {num_clients}.')
  x_train, y_train, x_test, y_test = data_files.read_mnist(data_dir, label)
  per_client = len(x_train) // num_clients
  if per_client < 2:
    raise ValueError(f'--num_clients={num_clients} leaves fewer than 2 '
                     f'{label} images per client.')
  rng = np.random.default_rng(seed)
  order = rng.permutation(len(x_train))
  x = flat_images(x_train)
  y = y_train.astype(np.int32)
  train, test = {}, {}
  for k in range(num_clients):
    part = order[k * per_client:(k + 1) * per_client]
    train[f'client{k}'], test[f'client{k}'] = client_arrays.split(
        x[part], y[part], client_test_fraction, rng)
  return _task(f'{dataset}_iid', train, test, x_test, y_test, batch_size)


def _task(name, train, test, x_test, y_test, batch_size,
          opt_out_pool=None) -> FederatedTask:
  return FederatedTask(
      name=name,
      client_train=train,
      client_test=test,
      server_test=(flat_images(x_test), y_test.astype(np.int32)),
      keras_model_fn=lambda: models.one_layer_nn(models.IMAGE_PIXELS, 10),
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(
          from_logits=True),
      batch_size=batch_size,
      opt_out_pool=opt_out_pool)


def _loader(build, default_clients: int, **fixed):
  """A registry loader (`tasks.REGISTRY`): `build` at the options' data,
  clients (`default_clients` when not given), batch size and seed."""
  def load_from(options: TaskOptions) -> FederatedTask:
    return build(options.data_dir, options.num_clients or default_clients,
                 batch_size=options.batch_size, seed=options.seed, **fixed)
  return load_from


load_task = _loader(load, NUM_CLIENTS)
load_skewed_task = _loader(load, NUM_CLIENTS, skewed=True)
load_fashion_task = _loader(load, NUM_CLIENTS, dataset='fashion_mnist')
load_iid_task = _loader(load_iid, IID_CLIENTS)
load_fashion_iid_task = _loader(load_iid, IID_CLIENTS, dataset='fashion_mnist')
