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
import contextlib
import dataclasses
import functools
import hashlib
import os
import re
import sqlite3
import struct
from typing import Callable, Hashable, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp import tasks
from tff_hdp.tasks import models
from tff_hdp.federated_task import Arrays, ClientSource, FederatedTask
from tff_hdp.federated_task import check_client, seeded_subset

# Elements of a client's dataset to batched `(x, y)`: applied to the whole
# client at once (a batch of all its elements), so parsing is one op.
Preprocess = Callable[[tf.data.Dataset], tf.data.Dataset]

# How TFF workers read a client's training examples: its key (a string, e.g.
# its id or its file) and, in a graph, the client's dataset from that key as
# a tensor (no lookup tables: TFF cannot send them).
Stored = tuple[Callable[[Hashable], str],
               Callable[[tf.Tensor], tf.data.Dataset]]

# Clients whose per-client metrics an evaluation reads, a fixed seeded
# subset of the population (`FederatedTask.evaluation_clients`).
EVALUATION_CLIENTS = 1000
_ALL = 2**31 - 1


def _whole_client(dataset: tf.data.Dataset, preprocess: Preprocess
                  ) -> tf.data.Dataset:
  """A client's dataset as one preprocessed element `(x, y)`; an empty batch
  is appended so a client without examples yields empty arrays."""
  empty = tf.data.Dataset.from_tensors(tf.nest.map_structure(
      lambda s: tf.zeros([0] + s.shape.as_list(), s.dtype),
      dataset.element_spec))
  return preprocess(dataset.batch(_ALL).concatenate(empty)).take(1)


def _reader(data: tff.simulation.datasets.ClientData, preprocess: Preprocess):
  """A graph from a client id to its preprocessed `(x, y)`: traced once, where
  building a dataset per client in eager mode costs tens of milliseconds."""

  @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
  def read(client_id):
    return _whole_client(data.serializable_dataset_fn(client_id),
                         preprocess).get_single_element()

  return read


@dataclasses.dataclass(frozen=True)
class ManyClients:
  """Many clients' examples read at once (`read_many`): each client's key
  (a tensor of `key_spec`), and its dataset of serialized examples from its
  key, traceable, so that one graph reads them all (`reader`)."""

  keys: dict[str, tf.Tensor]
  dataset: Callable[[tf.Tensor], tf.data.Dataset]
  key_spec: tf.TensorSpec

  def reader(self, preprocess: Preprocess):
    """A graph from a key to the client's preprocessed `(x, y)`: traced
    once, where one dataset per client in eager mode costs tens of
    milliseconds (1,000 clients: about 20 s)."""

    @tf.function(input_signature=[self.key_spec])
    def read(key):
      return _whole_client(self.dataset(key), preprocess).get_single_element()

    return read


ReadMany = Callable[[str, Sequence[str]], ManyClients]


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
               cache_clients: int = 64,
               stored: Stored | None = None,
               names: Sequence[Hashable] | None = None,
               file_ids: Sequence[str] | None = None,
               read_many: ReadMany | None = None):
    """`stored`, if given, lets TFF workers read clients themselves
    (`ClientSource.workers_read`); `names`, if given, are the clients' ids
    in the run, in the order of the file's ids (`write_task` keeps a task's
    ids, which need not be strings); `file_ids`, if given, are the ids of
    `train` the run trains (default: all); `read_many(split, ids)`, if
    given, reads many clients' serialized examples at once (a bulk read of
    the evaluation clients' test sets instead of one query each)."""
    file_ids = list(train.client_ids if file_ids is None else file_ids)
    if not file_ids:
      raise ValueError(f'{description} has no clients.')
    self.client_ids = file_ids if names is None else list(names)
    if len(self.client_ids) != len(file_ids):
      raise ValueError(f'{description} has {len(file_ids)} clients, not '
                       f'{len(self.client_ids)}.')
    self._file_id = dict(zip(self.client_ids, file_ids))
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
    self._stored = stored
    self._preprocess = preprocess
    self._read_many = read_many
    self._evaluation_tests: dict[Hashable, Arrays] | None = None

  def check(self, task_name: str) -> None:
    self._task_name = task_name  # Each client is checked as it is read.

  def _read(self, split: str, client_id: Hashable) -> Arrays:
    key = (split, client_id)
    if key in self._cache:
      self._cache.move_to_end(key)
      return self._cache[key]
    try:
      arrays = tuple(a.numpy() for a in self._read_fn[split](
          self._file_id[client_id]))
    except READ_ERRORS as e:  # another number of x, a damaged file
      raise ValueError(
          f'task {self._task_name!r}: client {client_id!r}\'s {split} data '
          f'in {self.description} cannot be read: {op_error_reason(e)}'
      ) from None
    arrays = self._checked(split, client_id, arrays)
    self._cache[key] = arrays
    if len(self._cache) > self._cache_clients:
      self._cache.popitem(last=False)
    return arrays

  def _checked(self, split: str, client_id: Hashable,
               arrays: Arrays) -> Arrays:
    """`arrays` if a run can use them, else a ValueError naming the
    client."""
    if split == 'training' and not len(arrays[0]):
      raise ValueError(f'task {self._task_name!r}: client {client_id!r} has no '
                       f'training examples in {self.description}; drop it '
                       'from the data.')
    arrays = check_client(self._task_name, client_id, split, arrays)
    problem = self.validate(arrays) if self.validate else None
    if problem:
      raise ValueError(f'task {self._task_name!r}: client {client_id!r}\'s '
                       f'{split} data in {self.description} {problem}.')
    return arrays

  def test_sets(self, client_ids: Sequence[Hashable]) -> dict[Hashable, Arrays]:
    """The test sets of `client_ids`, read at once where the storage allows
    (one query for all, not one per client), each checked."""
    ids = [c for c in client_ids if self.has_test(c)]
    if self._read_many is None:
      return {c: self.test(c) for c in ids}
    many = self._read_many('test', [self._file_id[c] for c in ids])
    read = many.reader(self._preprocess)
    out = {}
    for c in ids:
      try:
        arrays = tuple(a.numpy() for a in read(many.keys[self._file_id[c]]))
      except READ_ERRORS as e:
        raise ValueError(
            f'task {self._task_name!r}: client {c!r}\'s test data in '
            f'{self.description} cannot be read: {op_error_reason(e)}'
        ) from None
      out[c] = self._checked('test', c, arrays)
    return out

  def train(self, client_id: Hashable) -> Arrays:
    return self._read('training', client_id)

  @property
  def workers_read(self) -> bool:
    return self._stored is not None

  def stored_key(self, client_id: Hashable) -> str:
    self.train(client_id)  # Checked here first, naming the client.
    return self._stored[0](self._file_id[client_id])

  def read_stored(self, key: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return _whole_client(self._stored[1](key),
                         self._preprocess).get_single_element()

  def has_test(self, client_id: Hashable) -> bool:
    return self._file_id[client_id] in self._test_ids

  def test(self, client_id: Hashable) -> Arrays:
    if self._evaluation_tests is None and self.evaluation_clients:
      # Every evaluation scores the same seeded subset: read it once, in bulk.
      self._evaluation_tests = self.test_sets(
          seeded_subset(self.client_ids, self.evaluation_clients))
    if self._evaluation_tests and client_id in self._evaluation_tests:
      return self._evaluation_tests[client_id]
    if self.has_test(client_id):
      return self._read('test', client_id)
    x, y = self.train(self.client_ids[0])
    return x[:0], y[:0]

  def update_digest(self, digest) -> None:
    digest.update(self._fingerprint.encode())


def file_fingerprint(path: str, cache_folder: str | None = None) -> str:
  """SHA-256 of a file's bytes, read in blocks; with `cache_folder`, read
  once per version of the file (`_stat_key`) and kept there, so a start
  does not re-read a file of gigabytes it has hashed before."""

  def hash_bytes() -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
      for block in iter(lambda: f.read(2**22), b''):
        digest.update(block)
    return digest.hexdigest()

  if cache_folder is None:
    return hash_bytes()
  return _kept_fingerprint(cache_folder, _stat_key(path), hash_bytes)


def _stat_key(*paths: str) -> str:
  """A name for one version of some files: each one's path, device, inode,
  size, and modification and status-change times in ns. Writing a file
  changes its ctime, which no user tool sets back (`touch` sets only the
  mtime), so an unchanged key means unchanged bytes; a copy or a rewrite
  gets a new key and is hashed again."""
  digest = hashlib.sha256()
  for path in paths:
    st = os.stat(path)
    digest.update(repr((os.path.realpath(path), st.st_dev, st.st_ino,
                        st.st_size, st.st_mtime_ns, st.st_ctime_ns)).encode())
  return digest.hexdigest()


def _kept_fingerprint(cache_folder: str, key: str,
                      compute: Callable[[], str]) -> str:
  """The fingerprint kept under `key` in `cache_folder`, or `compute()`'s,
  then kept (a cache that cannot be written only costs the next start the
  computation again, so its errors are not the run's)."""
  kept = os.path.join(cache_folder, 'fingerprints', key)
  try:
    with open(kept, encoding='ascii') as f:
      known = f.read()
    if len(known) == 64 and all(c in '0123456789abcdef' for c in known):
      return known
  except (OSError, UnicodeDecodeError):
    pass  # not kept yet, or damaged: computed again below
  fingerprint = compute()
  try:
    os.makedirs(os.path.dirname(kept), exist_ok=True)
    with _private_file_in_place_of(kept) as tmp, open(
        tmp, 'w', encoding='ascii') as f:
      f.write(fingerprint)
  except OSError:
    pass
  return fingerprint


# What reading a client's examples can raise: TensorFlow's errors, and a
# UnicodeDecodeError where TensorFlow's own message quotes bytes of a
# damaged example that are not UTF-8.
READ_ERRORS = (tf.errors.OpError, UnicodeDecodeError)


def op_error_reason(error: Exception) -> str:
  """The line of a TensorFlow error that says what went wrong (a graph's
  error starts with 'Graph execution error:' and where it was traced)."""
  if isinstance(error, UnicodeDecodeError):
    return ('an example is not a serialized tf.train.Example (the file is '
            'damaged or holds other data).')
  lines = [re.sub(r'^(\{\{[^}]*\}\}\s*)?(Name: <unknown>,\s*)?', '',
                  line.strip()) for line in error.message.splitlines()]
  skip = ('Graph execution error', 'Detected at node', 'File ', '[[', '{{',
          'Traceback', 'Stack trace', 'Aborted')
  reasons = [line for line in lines if line and not line.startswith(skip)
             and not line.endswith(':') and not line.startswith('"')]
  return (reasons[-1] if reasons else lines[0]).rstrip('.') + '.'


# How the splits of a file are laid out (what `save_to_sql_client_data`
# and a FilePerUserClientData folder can hold): every client in 'train'
# with its own 'test' split (the server's test set: the evaluation clients'
# test examples); 'train' clients and other, 'test' clients (the server's
# test set: their examples); or training clients only ('train', or TFF's
# 'default_split' when no split was given: held-out clients' examples are
# the server's test set).
PER_CLIENT_TEST, TEST_CLIENTS, HELD_OUT = 'per-client test', 'test clients', (
    'held out')


def _sql_layout(path: str) -> tuple[str, str]:
  """(the split to train on, `PER_CLIENT_TEST` / `TEST_CLIENTS` /
  `HELD_OUT`) of an SqlClientData file; a one-line ValueError naming it
  when it is none, or has splits it cannot use."""
  try:
    with sqlite3.connect(f'file:{path}?mode=ro', uri=True) as connection:
      tables = {r[0] for r in connection.execute(
          "SELECT name FROM sqlite_master WHERE type='table'")}
      if not {'examples', 'client_metadata'} <= tables:
        raise ValueError(f'{path} is not a TFF SqlClientData file (no '
                         "'examples' and 'client_metadata' tables).")
      ids = collections.defaultdict(set)
      for split, client in connection.execute(
          'SELECT DISTINCT split_name, client_id FROM client_metadata'):
        ids[split].add(client)
  except sqlite3.DatabaseError as e:  # not SQLite, or a row not UTF-8
    raise ValueError(f'{path} is not a TFF SqlClientData file, or a damaged '
                     f'one ({e}).') from None
  if not ids:
    raise ValueError(f"{path} has no clients with 'train' examples.")
  train = 'train' if 'train' in ids else 'default_split'
  unused = sorted(set(ids) - {train, 'test'})
  if train not in ids or unused or (train == 'default_split' and 'test' in ids):
    raise ValueError(
        f'{path} has the splits {sorted(ids) or "(none)"}; a run reads '
        "'train' and optionally 'test' (the same clients' test examples, or "
        "clients of their own), or 'default_split' alone "
        '(save_to_sql_client_data without split names). Give every client '
        "a 'train' or 'test' split (its split_names_by_client_id).")
  return train, _test_layout(path, ids[train], ids.get('test', set()))


def _test_layout(where: str, train: set, test: set) -> str:
  """Where the server's test set comes from, given the train and test
  splits' client ids."""
  if not test:
    return HELD_OUT
  if test <= train:
    return PER_CLIENT_TEST
  if not test & train:
    return TEST_CLIENTS
  raise ValueError(
      f"{where}: some 'test' clients also have 'train' examples and some do "
      "not; either every 'test' client is a 'train' client too (its own "
      "test split) or none is (clients kept for testing).")


def _first_sql_example(path: str, split: str) -> bytes:
  """A serialized example of the file's `split`; a one-line ValueError
  naming the file when there is none."""
  with sqlite3.connect(f'file:{path}?mode=ro', uri=True) as connection:
    row = connection.execute(
        'SELECT serialized_example_proto FROM examples WHERE split_name = ? '
        'LIMIT 1', (split,)).fetchone()
  if row is None:
    raise ValueError(f"{path} has no clients with '{split}' examples.")
  return row[0]


def _has_client_index(path: str) -> bool:
  """Whether an index of `examples` starts with client_id (else reading a
  client scans the whole table)."""
  with sqlite3.connect(f'file:{path}?mode=ro', uri=True) as connection:
    for index in connection.execute("PRAGMA index_list('examples')"):
      columns = [row[2] for row in connection.execute(
          f"PRAGMA index_info('{index[1]}')")]
      if columns[:1] == ['client_id']:
        return True
  return False


def _is_indexed_copy(path: str) -> bool:
  """Whether `path` is a finished indexed copy. Not one: no file, or one
  that is empty or not SQLite (TFF's SqlClientData creates an empty
  database at a path it is given that has gone, so a copy deleted under a
  running reader comes back as 0 bytes)."""
  try:
    return os.path.exists(path) and _has_client_index(path)
  except sqlite3.DatabaseError:
    return False


def indexed_copy(path: str, fingerprint: str, folder: str) -> str:
  """An SqlClientData file with an index on examples(client_id,
  split_name): `path` if it has one, else a copy of it under `folder`,
  named by its fingerprint and built once (the user's file is never
  modified; the copy is the owner's alone, as it holds their examples)."""
  if _has_client_index(path):
    return path
  copy = os.path.join(folder, f'client_data-{fingerprint}.sqlite')
  with tasks.writing_cache(folder):
    os.makedirs(folder, exist_ok=True)
    if not _is_indexed_copy(copy):
      with _private_file_in_place_of(copy) as tmp, \
          sqlite3.connect(f'file:{path}?mode=ro', uri=True) as source, \
          sqlite3.connect(tmp) as target:
        source.backup(target)
        target.execute('CREATE INDEX examples_by_client ON examples '
                       '(client_id, split_name)')
  return copy


@contextlib.contextmanager
def _private_file_in_place_of(path: str):
  """A new file (0600: it holds clients' raw examples) beside `path` that
  replaces `path` when the block ends, or is removed if the block fails."""
  tmp = f'{path}.{os.getpid()}.tmp'
  os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
  try:
    yield tmp
  except BaseException:
    os.remove(tmp)
    raise
  os.replace(tmp, path)


def _sql_read_many(path: str):
  """`read_many` of an SqlClientData file: many clients' examples of one
  split in a few queries, each client's in stored order."""

  def read_many(split: str, ids: Sequence[str]) -> ManyClients:
    rows = collections.defaultdict(list)
    with sqlite3.connect(f'file:{path}?mode=ro', uri=True) as connection:
      for start in range(0, len(ids), 500):  # SQLite's parameter limit
        part = list(ids[start:start + 500])
        for client, proto in connection.execute(
            'SELECT client_id, serialized_example_proto FROM examples WHERE '
            f'split_name = ? AND client_id IN ({",".join("?" * len(part))}) '
            'ORDER BY rowid', [split, *part]):
          rows[client].append(proto)
    return ManyClients(
        {c: tf.constant(rows[c], tf.string, shape=[len(rows[c])])
         for c in ids}, tf.data.Dataset.from_tensor_slices,
        tf.TensorSpec([None], tf.string))

  return read_many


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


def _feature_kind(feature) -> str:
  """A tf.train.Feature's type and length, e.g. 'int64 x 3'."""
  kind = feature.WhichOneof('kind')
  if kind is None:
    return 'empty'
  return f"{kind[:-len('_list')]} x {len(getattr(feature, kind).value)}"


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
    found = ', '.join(
        f'{name} ({_feature_kind(features[name])})' for name in sorted(features))
    raise ValueError(
        f"{where}: examples must have a float feature 'x' and one int64 label "
        f"'y', found {found or 'no features'}.")
  return len(x.float_list.value)


# A TFRecord's bytes beside its data: the 8-byte length, its 4-byte CRC and
# the data's 4-byte CRC.
_RECORD_OVERHEAD = 16


def record_framing_problem(path: str) -> str | None:
  """Where the TFRecord file `path` is cut short, or None.

  TF's reader ends a file cut inside a record's 12-byte header as if the
  file ended there, without a word, and trains on the records before it;
  so the records are walked header by header here (no data is read).
  """
  size = os.path.getsize(path)
  position = 0
  with open(path, 'rb') as f:
    while position < size:
      if size - position < 12:
        return (f'cut short inside the header of the record at byte '
                f'{position} of its {size}')
      f.seek(position)
      (length,) = struct.unpack('<Q', f.read(8))
      position += length + _RECORD_OVERHEAD
  if position > size:
    return f'cut short inside its last record ({size} of {position} bytes)'
  return None


def _check_folder_files(files: dict[str, dict[str, str]]) -> None:
  """A one-line ValueError naming the first client file cut short."""
  for split, split_files in files.items():
    for name, file in split_files.items():
      problem = record_framing_problem(file)
      if problem:
        raise ValueError(f"client {name!r}'s {split} file {file} is "
                         f'{problem}: the file is damaged.')


def folder_fingerprint(path: str, cache_folder: str | None = None) -> str:
  """SHA-256 of a folder's train/ and test/ files: names and bytes; with
  `cache_folder`, kept per version of the folder's files as
  `file_fingerprint` keeps a file's."""
  files = [(split, name, file) for split in ('train', 'test')
           for name, file in _client_files(path, split).items()]

  def hash_files() -> str:
    digest = hashlib.sha256()
    for split, name, file in files:
      digest.update(f'{split}/{name}\0'.encode())
      digest.update(file_fingerprint(file).encode())
    return digest.hexdigest()

  if cache_folder is None:
    return hash_files()
  names = hashlib.sha256(repr([f[:2] for f in files]).encode()).hexdigest()
  return _kept_fingerprint(
      cache_folder, _stat_key(*(f[2] for f in files)) + names[:16],
      hash_files)


@dataclasses.dataclass(frozen=True)
class _Opened:
  """What `load_task` needs of a file or folder."""
  train: tff.simulation.datasets.ClientData
  test: tff.simulation.datasets.ClientData | None
  num_features: int
  fingerprint: str
  stored: Stored
  layout: str  # PER_CLIENT_TEST, TEST_CLIENTS or HELD_OUT
  train_split: str  # the split `read_many` names the training examples
  read_many: ReadMany
  notes: tuple[str, ...] = ()


def _folder_read_many(files: dict[str, dict[str, str]]):
  """`read_many` of a FilePerUserClientData folder ({split: {id: file}})."""

  def read_many(split: str, ids: Sequence[str]) -> ManyClients:
    return ManyClients({c: tf.constant(files[split][c]) for c in ids},
                       tf.data.TFRecordDataset, tf.TensorSpec([], tf.string))

  return read_many


def _open(path: str, cache_folder: str) -> _Opened:
  """An SqlClientData file or a FilePerUserClientData folder of TFRecords,
  opened for `ClientDataSource`; an unindexed file is read from its indexed
  copy under `cache_folder` (`indexed_copy`)."""
  datasets = tff.simulation.datasets
  if os.path.isdir(path):
    d = _num_features(path, _first_folder_example(path))
    files = {split: _client_files(path, split) for split in ('train', 'test')}
    _check_folder_files(files)
    return _Opened(
        datasets.FilePerUserClientData(files['train'],
                                       tf.data.TFRecordDataset),
        datasets.FilePerUserClientData(files['test'], tf.data.TFRecordDataset)
        if files['test'] else None, d, folder_fingerprint(path, cache_folder),
        (files['train'].__getitem__, tf.data.TFRecordDataset),
        _test_layout(path, set(files['train']), set(files['test'])),
        'train', _folder_read_many(files))
  if not os.path.isfile(path):
    raise ValueError(f'{path}: no such file or folder.')
  train_split, layout = _sql_layout(path)
  d = _num_features(path, _first_sql_example(path, train_split))
  fingerprint = file_fingerprint(path, cache_folder)
  notes = ()
  read_from = indexed_copy(path, fingerprint, cache_folder)
  if read_from != path:
    notes = (f'{path} has no index on examples(client_id, split_name), so '
             'reading a client would scan the whole file: reading an indexed '
             f'copy, {read_from} (built once; the file is not modified).',)
  train = datasets.SqlClientData(read_from, split_name=train_split)
  return _Opened(
      train, datasets.SqlClientData(read_from, split_name='test')
      if layout != HELD_OUT else None, d, fingerprint,
      (str, train.serializable_dataset_fn), layout, train_split,
      _sql_read_many(read_from), notes)


def _field(number: int, payload: bytes) -> bytes:
  """A length-delimited protobuf field (every length here is < 2^14)."""
  n = len(payload)
  length = bytes([n]) if n < 128 else bytes([n & 127 | 128, n >> 7])
  return bytes([number << 3 | 2]) + length + payload


def _entry(key: str, feature: bytes) -> bytes:
  return _field(1, _field(1, key.encode()) + _field(2, feature))


def example_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """Serialized `tf.train.Example`s {'x': float_list x, 'y': int64_list [y]}
  (integer y, classes below 128) or {'x': ..., 'y': float_list y} (float
  y, [n] or [n, k]) as rows of a uint8 matrix: the fixed layout with the
  values filled in."""
  floats = x.shape[1] * 4
  if np.issubdtype(y.dtype, np.floating):
    labels = np.ascontiguousarray(y, '<f4').reshape(len(y), -1)
    label_entry = _entry('y', _field(2, _field(1, bytes(labels.nbytes //
                                                         max(len(y), 1)))))
  else:
    labels, label_entry = None, _entry('y', _field(3, _field(1, b'\0')))
  whole = _field(1, _entry('x', _field(2, _field(1, bytes(floats)))) +
                 label_entry)
  head = len(whole) - len(label_entry) - floats
  rows = np.tile(np.frombuffer(whole, np.uint8), (len(x), 1))
  rows[:, head:head + floats] = np.ascontiguousarray(
      x, '<f4').view(np.uint8).reshape(len(x), floats)
  if labels is None:
    rows[:, -1] = y  # labels < 128: one varint byte
  elif labels.size:
    rows[:, -labels.shape[1] * 4:] = labels.view(np.uint8).reshape(
        len(y), -1)
  return rows


def write_sql(path: str, chunks, task_digest: str | None = None,
              indexed: bool = True) -> None:
  """Writes an SqlClientData file of 'x'/'y' examples at `path` (atomically).

  `chunks` yields `(ids, x, y, owner, n_train)`: client `ids[k]` owns the
  rows where `owner == k` (grouped, in order), its first `n_train[k]` in the
  'train' split and the rest in 'test'. `task_digest`, if given, is kept in
  a table of its own (`stored_task`). The file is the owner's alone (0600):
  it holds the clients' raw examples. Without `indexed` it has no index on
  examples(client_id, split_name), as TFF's own writer makes it (what
  benchmarks/client_data_setup.py times).
  """
  with _private_file_in_place_of(path) as tmp, sqlite3.connect(tmp) as con:
    if task_digest is not None:
      con.execute(f'CREATE TABLE {_TASK_TABLE} (data_digest TEXT NOT NULL)')
      con.execute(f'INSERT INTO {_TASK_TABLE} VALUES (?)', (task_digest,))
    con.execute('CREATE TABLE examples (split_name TEXT NOT NULL, client_id '
                'TEXT NOT NULL, serialized_example_proto BLOB NOT NULL)')
    con.execute('CREATE TABLE client_metadata (client_id TEXT NOT NULL, '
                'split_name TEXT NOT NULL, num_examples INTEGER NOT NULL)')
    for ids, x, y, owner, n_train in chunks:
      bounds = np.searchsorted(owner, np.arange(len(ids) + 1))
      is_train = np.arange(len(owner)) - bounds[owner] < n_train[owner]
      con.executemany(
          'INSERT INTO examples VALUES (?, ?, ?)',
          (('train' if t else 'test', ids[o], r.tobytes())
           for t, o, r in zip(is_train, owner, example_rows(x, y))))
      con.executemany('INSERT INTO client_metadata VALUES (?, ?, ?)', [
          (c, s, int(n)) for c, tr, al in zip(ids, n_train, np.diff(bounds))
          for s, n in (('train', tr), ('test', al - tr))])
    if indexed:
      con.execute('CREATE INDEX examples_by_client ON examples '
                  '(client_id, split_name)')


# The table of a file written by `write_task`: the task's data digest.
_TASK_TABLE = 'tff_hdp_task'
_CLIENTS_PER_CHUNK = 1000


def _written_digest(path: str) -> str:
  """The data digest `write_task` kept in the file at `path`; a one-line
  ValueError saying what the file is when it is not one it wrote."""
  if os.path.isdir(path):
    raise ValueError(f'{path} is a folder; name the file the task\'s clients '
                     'are written to (written on first use).')
  try:
    with sqlite3.connect(f'file:{path}?mode=ro', uri=True) as connection:
      tables = {r[0] for r in connection.execute(
          "SELECT name FROM sqlite_master WHERE type='table'")}
      if _TASK_TABLE in tables:
        row = connection.execute(
            f'SELECT data_digest FROM {_TASK_TABLE}').fetchone()
        if row:
          return row[0]
  except sqlite3.DatabaseError:
    raise ValueError(f'{path} is not a file this option wrote (not an SQLite '
                     'file); name a file that does not exist yet, and the '
                     'task\'s clients are written there.') from None
  if {'examples', 'client_metadata'} <= tables:
    raise ValueError(f'{path} is a ClientData file this option did not '
                     'write; to train on its clients use --client_data='
                     f'{path} (without --task), or name a new file here.')
  raise ValueError(f'{path} is an SQLite file this option did not write; '
                   'name a file that does not exist yet.')


def _holds_classes(task: FederatedTask) -> bool:
  """Whether every client's labels are classes `example_rows` writes as one
  int64 each (integers in [0, 128), one per example)."""
  for c in task.client_ids:
    for _, y in (task.train_arrays(c), task.test_arrays(c)):
      y = np.asarray(y)
      if not (np.issubdtype(y.dtype, np.integer) and y.ndim == 1 and
              y.min(initial=0) >= 0 and y.max(initial=0) < 128):
        return False
  return True


def _flat_examples(task: FederatedTask, arrays: Arrays,
                   classes: bool) -> Arrays:
  """`(x [n, d] float32, y)` of a client as `example_rows` writes them: y
  [n] classes (`classes`), else float32 labels [n, k] (e.g. regression
  targets, +-1 signs), which must hold the task's labels exactly (else a
  ValueError naming the task)."""
  x, y = arrays
  y = np.asarray(y)
  x = np.asarray(x, np.float32).reshape(len(x), -1)
  if classes:
    return x, y
  labels = y.astype(np.float32).reshape(len(y), -1)
  if not np.array_equal(labels.reshape(y.shape).astype(y.dtype), y):
    raise ValueError(f'task {task.name!r}: its labels are neither classes '
                     'in [0, 128) nor values float32 holds exactly, which is '
                     'what a stored client holds.')
  return x, labels


def write_task(task: FederatedTask, path: str,
               classes: bool | None = None) -> None:
  """Writes `task`'s clients, training and test examples, as an SqlClientData
  file of 'x'/'y' examples (features flattened), client k under the id
  `f'{k:08d}'` (TFF sorts ids as strings), with the task's data digest.
  `classes`: `_holds_classes(task)`, if the caller has it already."""
  ids = task.client_ids
  if classes is None:
    classes = _holds_classes(task)

  def chunks():
    for start in range(0, len(ids), _CLIENTS_PER_CHUNK):
      part = ids[start:start + _CLIENTS_PER_CHUNK]
      train = [_flat_examples(task, task.train_arrays(c), classes)
               for c in part]
      test = [_flat_examples(task, task.test_arrays(c), classes) if len(
          task.test_arrays(c)[0]) else (t[0][:0], t[1][:0])
              for c, t in zip(part, train)]
      both = [a for pair in zip(train, test) for a in pair]
      yield ([f'{start + k:08d}' for k in range(len(part))],
             np.concatenate([x for x, _ in both]),
             np.concatenate([y for _, y in both]),
             np.repeat(np.arange(len(part)),
                       [len(a[1]) + len(b[1]) for a, b in zip(train, test)]),
             np.array([len(a[1]) for a in train]))

  write_sql(path, chunks(), task.data_digest)


def stored_task(task: FederatedTask, path: str) -> FederatedTask:
  """`task` whose clients the TFF workers read from the SqlClientData file at
  `path` (written by `write_task` when absent): same clients, examples,
  orders and results, but a round sends clients' ids and orders, not their
  examples. Every worker must see the file at `path`. A ValueError names
  `path` when it holds other data."""
  classes = _holds_classes(task)
  if not os.path.exists(path):
    write_task(task, path, classes)
  written = _written_digest(path)
  if written != task.data_digest:
    raise ValueError(f'{path} was written by this option for other data '
                     f'than task {task.name!r} with these options; name '
                     'another file (or delete that one, which tff-hdp wrote, '
                     'to write these clients there).')
  x, y = task.train_arrays(task.client_ids[0])
  train = tff.simulation.datasets.SqlClientData(path, split_name='train')
  test = tff.simulation.datasets.SqlClientData(path, split_name='test')
  spec = {'x': tf.io.FixedLenFeature([int(np.prod(x.shape[1:], dtype=int))],
                                     tf.float32),
          'y': tf.io.FixedLenFeature(
              [] if classes else [int(np.prod(y.shape[1:], dtype=int))],
              tf.int64 if classes else tf.float32)}

  def preprocess(dataset: tf.data.Dataset) -> tf.data.Dataset:
    def parse(serialized):
      parsed = tf.io.parse_example(serialized, spec)
      return (tf.reshape(parsed['x'], [-1, *x.shape[1:]]),
              tf.reshape(tf.cast(parsed['y'], y.dtype), [-1, *y.shape[1:]]))
    return dataset.map(parse)

  source = ClientDataSource(
      train, test, preprocess, fingerprint=written,
      description=f'{path} ({len(train.client_ids)} clients)',
      evaluation_clients=task.clients.evaluation_clients,
      stored=(str, train.serializable_dataset_fn), names=task.client_ids)
  stored = dataclasses.replace(task, client_train=None, client_test=None,
                               clients=source)
  # The same data as `task`'s (the file says so): the same run, which a run
  # begun in memory may resume from the file and back.
  stored.__dict__['data_digest'] = written
  return stored


def _labels_outside(num_classes: int, origin: str,
                    arrays: Arrays) -> str | None:
  """What is wrong with a client's labels for K = `num_classes` classes,
  and where K came from (`origin`, '' when the caller gave it)."""
  y = arrays[1]
  bad = (y < 0) | (y >= num_classes)
  return (f'has labels outside [0, {num_classes}), e.g. {y[bad][0]}{origin}'
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


# Classes a softmax regression of `load_task` may have: K is taken from the
# labels, so a stray large label would otherwise size the model.
MAX_CLASSES = 2**16


def load_task(path: str, name: str, batch_size: int,
              num_classes: int | None = None,
              server_test: Arrays | None = None,
              evaluation_clients: int = EVALUATION_CLIENTS,
              cache_folder: str | None = None) -> FederatedTask:
  """A softmax-regression task on the 'x'/'y' examples of an SqlClientData
  file or a FilePerUserClientData folder (train/ and test/ TFRecord files),
  in any layout TFF's `save_to_sql_client_data` writes (`_Opened.layout`).

  Without `server_test` the server's test set is: the 'test' examples of
  the evaluation clients (a seeded subset), when clients have their own
  test split; the 'test' clients' examples (a seeded subset of as many),
  when the test clients are others; else the training examples of a seeded
  subset of the clients (`evaluation_clients`, at most a tenth of them),
  held out from training. The source's `notes` say which. Without
  `num_classes`, K is one more than the largest label of that test set, at
  most `MAX_CLASSES`. A label a client holds outside [0, K) is an error
  naming the client when it is read. `cache_folder` (default: the task
  cache) holds indexed copies of files without an index.
  """
  if cache_folder is None:
    cache_folder = tasks.cache_dir()
  opened = _open(path, cache_folder)
  parse = parse_examples(opened.num_features)
  described = f'{path} ({len(opened.train.client_ids)} clients)'
  notes = list(opened.notes)
  file_ids = list(opened.train.client_ids)
  held_out = []
  if opened.layout == HELD_OUT and server_test is None:
    held_out = seeded_subset(file_ids, max(1, min(evaluation_clients,
                                                  len(file_ids) // 10)))
    if len(held_out) == len(file_ids):
      raise ValueError(f"{path} has no 'test' examples and too few clients "
                       'to hold some out for testing.')
    kept = set(held_out)
    file_ids = [c for c in file_ids if c not in kept]
    notes.append(f"{path} has no 'test' split: the training examples of "
                 f'{len(held_out)} of its {len(opened.train.client_ids)} '
                 'clients (a seeded subset) are the server\'s test set, and '
                 'they are not trained on.')
  test = opened.test if opened.layout == PER_CLIENT_TEST else None
  source = ClientDataSource(opened.train, test, parse, opened.fingerprint,
                            described, evaluation_clients,
                            stored=opened.stored, file_ids=file_ids,
                            read_many=opened.read_many)
  source.notes = tuple(notes)
  source.check(name)
  if server_test is None:
    if opened.layout == PER_CLIENT_TEST:
      sets = source.test_sets(seeded_subset(source.client_ids,
                                            evaluation_clients))
    else:
      split = 'test' if opened.layout == TEST_CLIENTS else 'training'
      ids = (held_out or seeded_subset(list(opened.test.client_ids),
                                       evaluation_clients))
      if opened.layout == TEST_CLIENTS:
        source.notes += (
            f"{path}: its 'test' clients are others than its 'train' ones: "
            f'the examples of {len(ids)} of its {len(opened.test.client_ids)}'
            ' test clients (a seeded subset) are the server\'s test set; '
            'clients have no test split of their own, so per-client '
            'metrics are empty.',)
      many = opened.read_many(
          'test' if split == 'test' else opened.train_split, ids)
      read = many.reader(parse)
      sets = {}
      for c in ids:
        try:
          arrays = tuple(a.numpy() for a in read(many.keys[c]))
        except READ_ERRORS as e:
          raise ValueError(f'client {c!r}\'s examples in {path} cannot be '
                           f'read: {op_error_reason(e)}') from None
        sets[c] = check_client(name, c, split, arrays)
    sets = [a for a in sets.values() if len(a[0])]
    if not sets:
      raise ValueError(f"{path}: the clients of its server test set have no "
                       'examples.')
    server_test = tuple(np.concatenate(a) for a in zip(*sets))
  origin = ''
  if num_classes is None:
    num_classes = int(server_test[1].max()) + 1
    origin = (f' (the model has K = {num_classes} classes, one more than '
              'the largest label of the server test set)')
    if num_classes > MAX_CLASSES:
      raise ValueError(
          f'{path}: its test examples hold the label {num_classes - 1}; '
          f'labels are class indices, at most {MAX_CLASSES - 1} here (the '
          'model has one output per class up to the largest label).')
  source.validate = functools.partial(_labels_outside, num_classes, origin)
  return FederatedTask(
      name=name, client_train=None, client_test=None, server_test=server_test,
      keras_model_fn=lambda: models.softmax_regression(opened.num_features,
                                                       num_classes),
      loss_fn=logits_loss,
      batch_size=batch_size, clients=source)
