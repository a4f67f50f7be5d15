"""Embedded default task: scikit-learn's bundled digits, split non-IID.

It needs no download (scikit-learn ships the 1,797 8x8 images and is already a
TF Privacy dependency), so the demo and the tests run anywhere. Like non-IID
MNIST, each client holds images of a single digit, in equal numbers.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from sklearn import datasets

from tff_hdp.tasks import models
from tff_hdp.federated_task import FederatedTask
from tff_hdp.federated_task import TaskOptions


def load(clients_per_digit: int = 5, server_test_fraction: float = 0.2,
         client_test_fraction: float = 0.2, batch_size: int = 10,
         seed: int = 0) -> FederatedTask:
  """Digits split into `10 * clients_per_digit` single-digit clients."""
  if clients_per_digit < 1:
    raise ValueError(
        f'clients per digit must be >= 1, got {clients_per_digit}.')
  data = datasets.load_digits()
  x = (data.data / 16.0).astype(np.float32)
  y = data.target.astype(np.int32)
  rng = np.random.default_rng(seed)
  order = rng.permutation(len(x))
  n_server = int(round(server_test_fraction * len(x)))
  server_idx, client_idx = order[:n_server], order[n_server:]
  train, test = {}, {}
  for digit in range(10):
    idx = client_idx[y[client_idx] == digit]
    # Equal sizes: drop the remainder so every client has the same count.
    per_client = len(idx) // clients_per_digit
    if per_client < 2:
      raise ValueError(f'{clients_per_digit} clients per digit leaves fewer '
                       'than 2 examples per client.')
    for k in range(clients_per_digit):
      part = idx[k * per_client:(k + 1) * per_client]
      n_test = max(1, int(round(client_test_fraction * len(part))))
      cid = f'digit{digit}_client{k}'
      train[cid] = (x[part[n_test:]], y[part[n_test:]])
      test[cid] = (x[part[:n_test]], y[part[:n_test]])
  return FederatedTask(
      name='digits',
      client_train=train,
      client_test=test,
      server_test=(x[server_idx], y[server_idx]),
      keras_model_fn=lambda: models.softmax_regression(64, 10),
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(
          from_logits=True),
      batch_size=batch_size)


def load_task(options: TaskOptions) -> FederatedTask:
  """CLI entry: `num_clients` (a multiple of 10) sets the clients per digit."""
  num_clients = options.num_clients or 100
  if num_clients % 10:
    raise ValueError(
        f'digits: --num_clients must be a multiple of 10, got {num_clients}.')
  try:
    return load(clients_per_digit=num_clients // 10,
                batch_size=options.batch_size, seed=options.seed)
  except ValueError as e:  # too many clients for the digits
    raise ValueError(f'--num_clients={num_clients}: {e}') from None
