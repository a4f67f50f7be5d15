"""Tasks whose clients are a TFF `ClientData`, read when a client is sampled.

A `ClientDataSource` stands behind `FederatedTask` in place of arrays: it
reads a client's examples through `ClientData.serializable_dataset_fn` when
the run asks for them and keeps only the last few clients read, so memory is
the round's clients plus the server test set, whatever the population. What
a run must check of every client (examples present, values finite) is
checked when the client is read, naming it. The data's digest is the file's
hash, not a pass over every client.

`load_task` reads an `SqlClientData` file in TFF's schema, or a
`FilePerUserClientData` folder (train/<client id> and test/<client id>
TFRecord files), whose examples are `tf.train.Example`s with a float feature
'x' (d values) and an int64 label 'y' in [0, K), split into 'train' and
'test' (README, "Bringing your own ClientData").
"""

from __future__ import annotations

import collections
import functools
import hashlib
import os
import sqlite3
from typing import Callable, Hashable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tasks import models
from tff_hdp.federated_task import Arrays, ClientSource, FederatedTask
from tff_hdp.federated_task import check_client, seeded_subset

# Elements of a client's dataset to batched `(x, y)`: applied to the whole
# client at once (a batch of all its elements), so parsing is one op.
Preprocess = Callable[[tf.data.Dataset], tf.data.Dataset]

# Clients whose per-client metrics an evaluation reads, a fixed seeded
# subset of the population (`FederatedTask.evaluation_clients`).
EVALUATION_CLIENTS = 1000
_ALL = 2**31 - 1


def _reader(data: tff.simulation.datasets.ClientData, preprocess: Preprocess):
  """A graph from a client id to its preprocessed `(x, y)`: traced once, where
  building a dataset per client in eager mode costs tens of milliseconds.
  An empty batch is appended so a client without examples yields empty
  arrays."""
  empty = tf.data.Dataset.from_tensors(tf.nest.map_structure(
      lambda s: tf.zeros([0] + s.shape.as_list(), s.dtype),
      data.element_type_structure))

  @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
  def read(client_id):
    batches = data.serializable_dataset_fn(client_id).batch(_ALL)
    return preprocess(batches.concatenate(empty)).take(1).get_single_element()

  return read


class ClientDataSource(ClientSource):
  """A task's clients read from a TFF `ClientData`, one client at a time.

  `train` and `test` are ClientData of the same ids (a client absent from
  `test` has no test examples); `preprocess` maps a client's dataset to one
  batch `(x, y)` (features float32, labels as the model takes them);
  `fingerprint` identifies the data (e.g. the hash of its file); the last
  `cache_clients` clients read are kept, because a round reads each of its
  clients more than once. `validate(arrays)`, if set, says what is wrong
  with a client's arrays (e.g. a label the model has no output for), or
  returns None.
  """

  validate: Callable[[Arrays], str | None] | None = None


  def __init__(self, train: tff.simulation.datasets.ClientData,
               test: tff.simulation.datasets.ClientData | None,
               preprocess: Preprocess, fingerprint: str, description: str,
               evaluation_clients: int = EVALUATION_CLIENTS,
               cache_clients: int = 64):
    self.client_ids = list(train.client_ids)
    if not self.client_ids:
      raise ValueError(f'{description} has no clients.')
    self.description = description
    self.evaluation_clients = evaluation_clients
    self._read_fn = {'training': _reader(train, preprocess)}
    self._test_ids = frozenset(test.client_ids) if test is not None else ()
    if test is not None:
      self._read_fn['test'] = _reader(test, preprocess)
    self._fingerprint = fingerprint
    self._cache: collections.OrderedDict = collections.OrderedDict()
    self._cache_clients = cache_clients
    self._task_name = description

  def check(self, task_name: str) -> None:
    self._task_name = task_name  # Each client is checked as it is read.

  def _read(self, split: str, client_id: Hashable) -> Arrays:
    key = (split, client_id)
    if key in self._cache:
      self._cache.move_to_end(key)
      return self._cache[key]
    try:
      arrays = tuple(a.numpy() for a in self._read_fn[split](client_id))
    except tf.errors.InvalidArgumentError as e:  # e.g. another number of x
      raise ValueError(
          f'task {self._task_name!r}: client {client_id!r}\'s {split} data '
          f'in {self.description} do not fit the task\'s layout: '
          f'{e.message.splitlines()[0]}') from None
    if split == 'training' and not len(arrays[0]):
      raise ValueError(f'task {self._task_name!r}: client {client_id!r} has no '
                       f'training examples in {self.description}; drop it '
                       'from the data.')
    arrays = check_client(self._task_name, client_id, split, arrays)
    problem = self.validate(arrays) if self.validate else None
    if problem:
      raise ValueError(f'task {self._task_name!r}: client {client_id!r}\'s '
                       f'{split} data in {self.description} {problem}.')
    self._cache[key] = arrays
    if len(self._cache) > self._cache_clients:
      self._cache.popitem(last=False)
    return arrays

  def train(self, client_id: Hashable) -> Arrays:
    return self._read('training', client_id)

  def has_test(self, client_id: Hashable) -> bool:
    return client_id in self._test_ids

  def test(self, client_id: Hashable) -> Arrays:
    if client_id in self._test_ids:
      return self._read('test', client_id)
    x, y = self.train(self.client_ids[0])
    return x[:0], y[:0]

  def update_digest(self, digest) -> None:
    digest.update(self._fingerprint.encode())


def file_fingerprint(path: str) -> str:
  """SHA-256 of a file's bytes, read in blocks."""
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(2**22), b''):
      digest.update(block)
  return digest.hexdigest()


def _first_sql_example(path: str) -> bytes:
  """A serialized example of the file's 'train' split; a one-line
  ValueError naming the file when it is no SqlClientData with clients."""
  try:
    with sqlite3.connect(f'file:{path}?mode=ro', uri=True) as connection:
      tables = {r[0] for r in connection.execute(
          "SELECT name FROM sqlite_master WHERE type='table'")}
      if not {'examples', 'client_metadata'} <= tables:
        raise ValueError(f'{path} is not a TFF SqlClientData file (no '
                         "'examples' and 'client_metadata' tables).")
      row = connection.execute(
          "SELECT serialized_example_proto FROM examples WHERE "
          "split_name = 'train' LIMIT 1").fetchone()
  except sqlite3.DatabaseError as e:
    raise ValueError(f'{path} is not a TFF SqlClientData file ({e}).') from None
  if row is None:
    raise ValueError(f"{path} has no clients with 'train' examples.")
  return row[0]


def _client_files(path: str, split: str) -> dict[str, str]:
  folder = os.path.join(path, split)
  if not os.path.isdir(folder):
    return {}
  return {name: os.path.join(folder, name) for name in sorted(
      os.listdir(folder)) if os.path.isfile(os.path.join(folder, name))}


def _first_folder_example(path: str) -> bytes:
  """A serialized example of the folder's first 'train' client; a one-line
  ValueError naming the folder or file when there is none."""
  files = _client_files(path, 'train')
  if not files:
    raise ValueError(f"{path} has no client files in {path}/train/ (a "
                     'FilePerUserClientData folder: train/<client id> and '
                     'test/<client id> TFRecord files).')
  first = next(iter(files.values()))
  try:
    return next(iter(tf.data.TFRecordDataset(first).take(1))).numpy()
  except (tf.errors.OpError, StopIteration):
    raise ValueError(f'{first} is not a TFRecord file of examples.') from None


def _num_features(where: str, serialized: bytes) -> int:
  """d of examples {'x': d floats, 'y': one int64}; else a one-line
  ValueError naming `where`."""
  try:
    features = tf.train.Example.FromString(serialized).features.feature
  except Exception:  # pylint: disable=broad-except  # protobuf's DecodeError
    raise ValueError(f'{where}: its examples are not serialized '
                     'tf.train.Example protos.') from None
  x, y = features.get('x'), features.get('y')
  if (x is None or y is None or x.WhichOneof('kind') != 'float_list' or
      y.WhichOneof('kind') != 'int64_list' or len(y.int64_list.value) != 1 or
      not x.float_list.value):
    raise ValueError(
        f"{where}: examples must have a float feature 'x' and one int64 label "
        f"'y', found {sorted(features)}.")
  return len(x.float_list.value)


def folder_fingerprint(path: str) -> str:
  """SHA-256 of a folder's train/ and test/ files: names and bytes."""
  digest = hashlib.sha256()
  for split in ('train', 'test'):
    for name, file in _client_files(path, split).items():
      digest.update(f'{split}/{name}\0'.encode())
      digest.update(file_fingerprint(file).encode())
  return digest.hexdigest()


def _open(path: str):
  """(train, test, d, fingerprint) of an SqlClientData file or a
  FilePerUserClientData folder of TFRecords."""
  datasets = tff.simulation.datasets
  if os.path.isdir(path):
    d = _num_features(path, _first_folder_example(path))
    test_files = _client_files(path, 'test')
    return (datasets.FilePerUserClientData(_client_files(path, 'train'),
                                           tf.data.TFRecordDataset),
            datasets.FilePerUserClientData(test_files, tf.data.TFRecordDataset)
            if test_files else None, d, folder_fingerprint(path))
  if not os.path.isfile(path):
    raise ValueError(f'{path}: no such file or folder.')
  d = _num_features(path, _first_sql_example(path))
  return (datasets.SqlClientData(path, split_name='train'),
          datasets.SqlClientData(path, split_name='test'), d,
          file_fingerprint(path))


def _labels_outside(num_classes: int, arrays: Arrays) -> str | None:
  y = arrays[1]
  bad = (y < 0) | (y >= num_classes)
  return (f'has labels outside [0, {num_classes}), e.g. {y[bad][0]}'
          if bad.any() else None)


def parse_examples(num_features: int) -> Preprocess:
  """Batched serialized 'x'/'y' examples to `(x float32 [n, d], y int32
  [n])`."""
  spec = {'x': tf.io.FixedLenFeature([num_features], tf.float32),
          'y': tf.io.FixedLenFeature([], tf.int64)}

  def preprocess(dataset: tf.data.Dataset) -> tf.data.Dataset:
    def parse(serialized):
      parsed = tf.io.parse_example(serialized, spec)
      return parsed['x'], tf.cast(parsed['y'], tf.int32)
    return dataset.map(parse)

  return preprocess


def logits_loss() -> tf.keras.losses.Loss:
  """The loss of `models.softmax_regression`, whose outputs are logits."""
  return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def load_task(path: str, name: str, batch_size: int,
                  num_classes: int | None = None,
                  server_test: Arrays | None = None,
                  evaluation_clients: int = EVALUATION_CLIENTS
                  ) -> FederatedTask:
  """A softmax-regression task on the 'x'/'y' examples of an SqlClientData
  file or a FilePerUserClientData folder (train/ and test/ TFRecord files).

  Without `server_test`, the server test set is the 'test' examples of the
  evaluation clients (a seeded subset); without `num_classes`, K is one more
  than the largest label the server test set holds. A label a client holds
  outside [0, K) is an error naming the client when it is read.
  """
  train, test, num_features, fingerprint = _open(path)
  if (test is None or not test.client_ids) and server_test is None:
    raise ValueError(f"{path} has no 'test' examples to evaluate on.")
  parse = parse_examples(num_features)
  source = ClientDataSource(train, test, parse, fingerprint,
                            f'{path} ({len(train.client_ids)} clients)',
                            evaluation_clients)
  if server_test is None:
    chosen = [c for c in seeded_subset(source.client_ids, evaluation_clients)
              if source.has_test(c)]
    server_test = tuple(np.concatenate(a) for a in
                        zip(*(source.test(c) for c in chosen)))
    if not len(server_test[0]):
      raise ValueError(f"{path}: its evaluation clients have no 'test' "
                       'examples.')
  if num_classes is None:
    num_classes = int(server_test[1].max()) + 1
  source.validate = functools.partial(_labels_outside, num_classes)
  return FederatedTask(
      name=name, client_train=None, client_test=None, server_test=server_test,
      keras_model_fn=lambda: models.softmax_regression(num_features,
                                                       num_classes),
      loss_fn=logits_loss,
      batch_size=batch_size, clients=source)
