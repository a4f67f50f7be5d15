"""Per-client numpy bookkeeping that every task loader shares.

Loaders read very different files, but then do the same few things to each
client's `(x, y)`: split it into train and test, standardize a silo's features
with its own training statistics, pick a seeded subset of clients, and drop
the clients left without examples (`FederatedTask` refuses them) while
counting them, so a damaged shard shows up as a number instead of a crash.
"""

from __future__ import annotations

from typing import Hashable, Mapping, Sequence

from absl import logging
import numpy as np

from tff_hdp.federated_task import Arrays

ClientArrays = dict[Hashable, Arrays]


def split(x: np.ndarray, y: np.ndarray, test_fraction: float,
          rng: np.random.Generator) -> tuple[Arrays, Arrays]:
  """A shuffled `(train, test)` split; both non-empty when len(x) >= 2."""
  if not 0.0 < test_fraction < 1.0:
    raise ValueError(f'test fraction must be in (0, 1), got {test_fraction}.')
  order = rng.permutation(len(x))
  n_test = int(round(test_fraction * len(x)))
  if len(x) >= 2:
    n_test = min(max(n_test, 1), len(x) - 1)
  test, train = order[:n_test], order[n_test:]
  return (x[train], y[train]), (x[test], y[test])


def standardize(train: Arrays, test: Arrays) -> tuple[Arrays, Arrays]:
  """Features scaled by the training split's mean and std (std 0 -> 1)."""
  mean = train[0].mean(axis=0)
  std = train[0].std(axis=0)
  std[std == 0] = 1.0
  return (((train[0] - mean) / std).astype(np.float32), train[1]), (
      ((test[0] - mean) / std).astype(np.float32), test[1])


def subset(client_ids: Sequence[Hashable], num_clients: int | None,
           seed: int) -> list[Hashable]:
  """All of `client_ids`, or a seeded random `num_clients` of them in order."""
  if num_clients is None:
    return list(client_ids)
  if not 1 <= num_clients <= len(client_ids):
    raise ValueError(f'--num_clients must be in [1, {len(client_ids)}] (the '
                     f'clients available), got {num_clients}.')
  keep = np.sort(np.random.default_rng(seed).choice(
      len(client_ids), num_clients, replace=False))
  return [client_ids[i] for i in keep]


def pooled(clients: Mapping[Hashable, Arrays]) -> Arrays:
  """All clients' examples in one `(x, y)`, e.g. the union of test sets."""
  return (np.concatenate([x for x, _ in clients.values()]),
          np.concatenate([y for _, y in clients.values()]))


def drop_empty(name: str, train: Mapping[Hashable, Arrays],
               test: Mapping[Hashable, Arrays]
               ) -> tuple[ClientArrays, ClientArrays, int]:
  """Clients with training and test examples, and how many were dropped.

  A client missing from `test` counts as having no test examples.
  """
  keep = [c for c in train
          if len(train[c][0]) and c in test and len(test[c][0])]
  dropped = len(set(train) | set(test)) - len(keep)
  if dropped:
    logging.warning('task %s: dropped %d clients without training or test '
                    'examples.', name, dropped)
  if not keep:
    raise ValueError(f'task {name!r}: no client has both training and test '
                     'examples.')
  return ({c: train[c] for c in keep}, {c: test[c] for c in keep}, dropped)
