"""A synthetic cross-device population, as a TFF `SqlClientData` file.

N clients, non-IID: each holds 5-20 training and 1-4 test examples of
`NUM_FEATURES` features drawn around its labels' class means, shifted by a
client offset, with labels from the client's own Dirichlet(0.5) mix of
`NUM_CLASSES` classes. Everything follows from (N, seed): clients are drawn
in fixed chunks, each from its own `(seed, chunk)` generator, and a file is
reproducible byte for byte.

The file is written by `client_data.write_sql` (TFF's schema plus an index on
client ids, fast enough for 10^6 clients). Files are cached by (N, seed).
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from tff_hdp import tasks
from tff_hdp.tasks import client_data, models
from tff_hdp.federated_task import Arrays, FederatedTask, TaskOptions

NUM_FEATURES = 20
NUM_CLASSES = 10
DEFAULT_CLIENTS = 1000
_CHUNK = 10_000  # clients per generator; fixed, or the data would change
_SERVER_CLIENTS = 200
_VERSION = 1  # bump when the generated data change: it keys the cache


def _draw(rng: np.random.Generator, means: np.ndarray, m: int
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """m clients' examples: x, y, each example's client, train sizes."""
  n_train = rng.integers(5, 21, m)
  n_test = rng.integers(1, 5, m)
  shifts = rng.normal(0.0, 0.5, (m, NUM_FEATURES))
  mixes = rng.dirichlet(np.full(NUM_CLASSES, 0.5), m)
  owner = np.repeat(np.arange(m), n_train + n_test)
  u = rng.random(len(owner))
  y = np.minimum((np.cumsum(mixes, 1)[owner] < u[:, None]).sum(1),
                 NUM_CLASSES - 1)
  x = means[y] + shifts[owner] + rng.normal(size=(len(owner), NUM_FEATURES))
  return x.astype(np.float32), y.astype(np.int32), owner, n_train


def _means(seed: int) -> np.ndarray:
  return np.random.default_rng([seed, 0]).normal(size=(NUM_CLASSES,
                                                       NUM_FEATURES))


def client_id(i: int) -> str:
  return f'{i:07d}'  # zero-padded: TFF sorts ids as strings


def _chunks(num_clients: int, seed: int):
  """(first client, x, y, owner, n_train) per chunk of clients."""
  means = _means(seed)
  for k, start in enumerate(range(0, num_clients, _CHUNK)):
    m = min(_CHUNK, num_clients - start)
    yield (start, *_draw(np.random.default_rng([seed, 1, k]), means, m))


def _split(x, y, owner, n_train, start):
  """{client id: (train, test)} of one chunk."""
  bounds = np.searchsorted(owner, np.arange(len(n_train) + 1))
  out = {}
  for i, n in enumerate(n_train):
    lo, hi = bounds[i], bounds[i + 1]
    out[client_id(start + i)] = ((x[lo:lo + n], y[lo:lo + n]),
                                 (x[lo + n:hi], y[lo + n:hi]))
  return out


def generate_arrays(num_clients: int, seed: int
                    ) -> tuple[dict, dict, Arrays]:
  """The population as arrays: train and test by client id, server test."""
  train, test = {}, {}
  for chunk in _chunks(num_clients, seed):
    for c, (tr, te) in _split(*chunk[1:], chunk[0]).items():
      train[c], test[c] = tr, te
  return train, test, server_test(seed)


def server_test(seed: int) -> Arrays:
  """All examples of fresh clients of the same population."""
  x, y, _, _ = _draw(np.random.default_rng([seed, 2]), _means(seed),
                     _SERVER_CLIENTS)
  return x, y


def write(path: str, num_clients: int, seed: int) -> None:
  """Writes the population of `num_clients` clients drawn from `seed`."""
  client_data.write_sql(path, (([client_id(start + i) for i in range(len(n_train))], x,
                    y, owner, n_train)
                   for start, x, y, owner, n_train in _chunks(num_clients,
                                                              seed)))


def cached_file(num_clients: int, seed: int, folder: str | None = None
                ) -> str:
  """The population's file under `folder` (default `tasks.cache_dir()`),
  written on first use."""
  folder = folder or tasks.cache_dir()
  path = os.path.join(folder,
                      f'population-v{_VERSION}-n{num_clients}-s{seed}.sqlite')
  with tasks.writing_cache(folder):
    os.makedirs(folder, exist_ok=True)
    if not os.path.exists(path):
      write(path, num_clients, seed)
  return path


def _model() -> tf.keras.Model:
  return models.softmax_regression(NUM_FEATURES, NUM_CLASSES)


def load(num_clients: int = DEFAULT_CLIENTS, seed: int = 0,
         batch_size: int = 10, folder: str | None = None) -> FederatedTask:
  """The population read from its (cached) SqlClientData file."""
  return client_data.load_task(
      cached_file(num_clients, seed, folder), 'population', batch_size,
      NUM_CLASSES, server_test(seed))


def load_arrays(num_clients: int = DEFAULT_CLIENTS, seed: int = 0,
                batch_size: int = 10) -> FederatedTask:
  """The same population held as arrays (small N: tests, comparisons)."""
  train, test, server = generate_arrays(num_clients, seed)
  return FederatedTask(
      name='population', client_train=train, client_test=test,
      server_test=server, keras_model_fn=_model,
      loss_fn=client_data.logits_loss,
      batch_size=batch_size)


def load_task(options: TaskOptions) -> FederatedTask:
  """CLI entry: `num_clients` sets N (default 1,000); `data_dir` is where
  the generated file is cached."""
  return load(options.num_clients or DEFAULT_CLIENTS, options.seed,
              options.batch_size, options.data_dir)
