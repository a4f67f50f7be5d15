"""Clients' training examples on this machine's disk, read inside TFF.

A client's examples reach a TFF computation serialized inside its tf.data
graph, every round: Robust-HDP's 20 MNIST clients of 3,000 examples are
188 MB a round, which TFF takes seconds to serialize and move to its worker
(benchmarks/untrusted_round_speed.py). Written once, as raw arrays in a
private temporary directory, a client's data travel as two file names and
the round's order instead (the permutation `FederatedTask.train_order`
gives), and the worker reads them from the page cache: the same batches, in
the same order, as `FederatedTask.train_dataset`. Only a worker on this
machine (the default local one) can read them; with remote workers the
examples travel as before (`runtime.workers_share_disk`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import Hashable

import numpy as np
import tensorflow as tf

from tff_hdp.federated_task import FederatedTask


class ClientFiles:
  """`train_dataset(client, seed)` of a task, read from files it writes.

  The directory (mode 0700) and its files go when the object does, or at
  exit.
  """

  def __init__(self, task: FederatedTask):
    self._task = task
    self._directory = tempfile.mkdtemp(prefix='tff_hdp_clients_')
    self._cleanup = weakref.finalize(self, shutil.rmtree, self._directory,
                                     True)
    self._files: dict[Hashable, list[tuple[str, np.dtype, tuple]]] = {}

  def _write(self, client_id: Hashable) -> list[tuple[str, np.dtype, tuple]]:
    """The client's (file, dtype, shape) per array, written on first use."""
    if client_id not in self._files:
      entries = []
      for i, array in enumerate(self._task.train_arrays(client_id)):
        array = np.ascontiguousarray(array)
        path = os.path.join(self._directory, f'{len(self._files)}_{i}.raw')
        array.tofile(path)
        entries.append((path, array.dtype, array.shape))
      self._files[client_id] = entries
    return self._files[client_id]

  def train_dataset(self, client_id: Hashable, seed: int) -> tf.data.Dataset:
    """`task.train_dataset(client_id, seed)`, whose examples the graph reads
    from this object's files."""
    entries = self._write(client_id)
    order = self._task.train_order(client_id, seed).astype(np.int64)

    def read(_):
      return tuple(
          tf.gather(tf.reshape(tf.io.decode_raw(tf.io.read_file(path),
                                                tf.as_dtype(dtype)), shape),
                    order) for path, dtype, shape in entries)

    return tf.data.Dataset.range(1).map(read).unbatch().batch(
        self._task.batch_size)

  def close(self) -> None:
    """Deletes the files now."""
    self._cleanup()
