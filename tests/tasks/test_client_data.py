"""A task backed by a TFF ClientData runs exactly as the same data held as
arrays, reads clients only when asked, and refuses a bad file in one line."""

import os
import sqlite3
import stat
import struct

import numpy as np
import pytest
import tensorflow as tf

from tff_hdp.tasks import client_data, population
from tff_hdp.learning import cohort
from tff_hdp.privacy import accounting, plans
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.simulation import evaluation, trusted_setting

pytestmark = pytest.mark.tf

N = 200


def seeded_fedhdp_run(task, out, cohort_size=0, rounds=3, rate=0.1):
  """(rounds.csv text, final model arrays) of a short seeded FedHDP run."""
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', 4.0, 1e-4)], 0.2, seed=0)
  settings = trusted_setting.Settings(
      rounds=rounds, sampling=accounting.PoissonSampling(rate),
      clip=plans.ClipSettings(initial_norm=0.5, count_stddev=3.0),
      eval_every=1, checkpoint_every=0, unsafe_seeded_dp_randomness=True,
      cohort_size=cohort_size)
  config = trusted_setting.Configuration('fedhdp', 0.5)
  trusted_setting.run_configuration(task, config, choices, settings, out,
                                    progress=False)
  run_dir = os.path.join(out, config.name)
  with open(os.path.join(run_dir, 'rounds.csv')) as f:
    rounds = f.read()
  with np.load(os.path.join(run_dir, 'final_model.npz')) as f:
    model = {k: f[k] for k in f.files}
  return rounds, model


@pytest.mark.parametrize('cohort_size', [0, 8])
def test_client_data_and_arrays_give_the_same_run(tmp_path, cohort_size):
  arrays = population.load_arrays(N, seed=0)
  sql = population.load(N, seed=0, folder=str(tmp_path / 'cache'))
  assert sql.client_ids == arrays.client_ids
  rounds, model = seeded_fedhdp_run(arrays, str(tmp_path / 'arrays'),
                                    cohort_size)
  sql_rounds, sql_model = seeded_fedhdp_run(sql, str(tmp_path / 'sql'),
                                            cohort_size)
  assert sql_rounds == rounds
  assert rounds.count('\n') == 4  # a header and three rounds
  assert sorted(sql_model) == sorted(model)
  for k in model:
    np.testing.assert_array_equal(sql_model[k], model[k])


def _graph_bytes(dataset):
  # pylint: disable-next=protected-access
  return dataset._as_serialized_graph().numpy()


def test_a_round_carries_a_clients_path_and_order_not_its_examples(tmp_path):
  path = population.cached_file(N, 0, str(tmp_path))
  sql = population.load(N, seed=0, folder=str(tmp_path))
  arrays = population.load_arrays(N, seed=0)
  clients = sql.client_ids[:8]
  for c in clients[:2]:
    sent = sql.train_dataset(c, 3)
    assert path.encode() in _graph_bytes(sent)
    for got, want in zip(sent, arrays.train_dataset(c, 3), strict=True):
      for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
  packed = cohort.pack_cohort([sql.shuffled_examples(c, 3) for c in clients],
                              [[1.0]] * 8, 1, slots=10)
  want = cohort.pack_cohort([arrays.shuffled_train(c, 3) for c in clients],
                            [[1.0]] * 8, 1, slots=10)
  assert path.encode() in _graph_bytes(packed)
  got, want = packed.get_single_element(), want.get_single_element()
  assert list(got) == list(want)
  for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want), strict=True):
    assert g.dtype == w.dtype
    np.testing.assert_array_equal(g, w)


def test_what_a_round_sends_does_not_grow_with_the_examples(tmp_path):
  sizes = []
  for d in (3, 3000):
    clients = {c: ((np.full((40, d), i, np.float32), np.full(40, i % 2)),
                   (np.zeros((1, d)), np.arange(1) + 1)) for i, c in
               enumerate('abcdef')}
    task = _load(_file(tmp_path / f'd{d}.sqlite', clients))
    sent = cohort.pack_cohort(
        [task.shuffled_examples(c, 0) for c in task.client_ids],
        [[1.0]] * 6, 1)
    assert sent.get_single_element()['data'][0].shape == (6, 40, d)
    sizes.append(len(_graph_bytes(sent)))
  assert abs(sizes[1] - sizes[0]) < 100, sizes  # the paths' lengths differ


def test_digest_is_the_files_hash_not_a_pass_over_clients(tmp_path):
  path = population.cached_file(N, 0, str(tmp_path))
  task = population.load(N, seed=0, folder=str(tmp_path))
  other = population.load(N, seed=1, folder=str(tmp_path))
  assert task.data_digest != other.data_digest
  assert not task.clients._cache  # pylint: disable=protected-access
  assert client_data.file_fingerprint(path)  # the digest's input


def test_a_files_hash_is_kept_per_version_of_the_file(tmp_path):
  """A start reads a hashed file's stat, not its bytes, and a rewrite of
  the same size with its mtime set back is hashed again (its ctime moved)."""
  path = str(tmp_path / 'data.bin')
  cache = str(tmp_path / 'cache')
  with open(path, 'wb') as f:
    f.write(b'a' * 1000)
  first = client_data.file_fingerprint(path, cache)
  assert first == client_data.file_fingerprint(path)
  (kept,) = os.listdir(os.path.join(cache, 'fingerprints'))
  with open(os.path.join(cache, 'fingerprints', kept), 'w') as f:
    f.write('0' * 64)  # what a start reads back instead of the bytes
  assert client_data.file_fingerprint(path, cache) == '0' * 64
  before = os.stat(path)
  with open(path, 'r+b') as f:
    f.write(b'b')
  os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
  assert os.stat(path).st_size == before.st_size
  assert client_data.file_fingerprint(path, cache) == \
      client_data.file_fingerprint(path) != first


def test_a_folders_hash_is_kept_and_follows_its_files(tmp_path):
  folder = tmp_path / 'clients'
  for split in ('train', 'test'):
    (folder / split).mkdir(parents=True)
    for name in ('a', 'b'):
      (folder / split / f'{name}.tfrecord').write_bytes(split.encode() +
                                                         name.encode())
  cache = str(tmp_path / 'cache')
  first = client_data.folder_fingerprint(str(folder), cache)
  assert first == client_data.folder_fingerprint(str(folder))
  assert client_data.folder_fingerprint(str(folder), cache) == first
  (folder / 'train' / 'c.tfrecord').write_bytes(b'c')
  assert client_data.folder_fingerprint(str(folder), cache) == \
      client_data.folder_fingerprint(str(folder)) != first


def test_a_hash_cache_that_cannot_be_written_costs_only_time(tmp_path):
  path = tmp_path / 'data.bin'
  path.write_bytes(b'x' * 10)
  blocked = tmp_path / 'blocked'
  blocked.write_text('a file where the cache folder would be')
  assert client_data.file_fingerprint(str(path), str(blocked)) == \
      client_data.file_fingerprint(str(path))


def test_evaluation_scores_a_fixed_bounded_subset(tmp_path):
  task = client_data.load_task(population.cached_file(N, 0, str(tmp_path)),
                                   'population', 10, evaluation_clients=20)
  chosen = task.evaluation_clients(task.client_ids)
  assert len(chosen) == 20 and chosen == task.evaluation_clients(
      task.client_ids)
  flags = {c: i % 2 == 0 for i, c in enumerate(task.client_ids)}
  weights = trusted_setting.tff.learning.models.ModelWeights.from_model(
      task.tff_model_fn()())
  metrics = evaluation.global_model_metrics(task, weights, flags)
  assert metrics['acc_g_p'] is not None and metrics['acc_g_np'] is not None


def _file(path, clients):
  """An 'x'/'y' SqlClientData file of {id: ((x, y) train, (x, y) test)}."""
  ids = list(clients)
  parts = [a for c in ids for a in clients[c]]
  x = np.concatenate([p[0] for p in parts]).astype(np.float32)
  y = np.concatenate([p[1] for p in parts])
  owner = np.repeat(np.arange(len(ids)), [len(tr[1]) + len(te[1])
                                          for tr, te in clients.values()])
  n_train = np.array([len(tr[1]) for tr, _ in clients.values()])
  client_data.write_sql(str(path), [(ids, x, y, owner, n_train)])
  return str(path)


def _client(n, label=0, value=0.5):
  """n training examples (x all `value`, label `label`) and one test example
  (x 0.5, label 0, or `label` for a finite client)."""
  return ((np.full((n, 3), value), np.full(n, label)),
          (np.full((1, 3), 0.5), np.full(1, label if value == 0.5 else 0)))


def _load(path):
  return client_data.load_task(path, 'mine', batch_size=2)


def test_a_file_that_is_not_client_data_is_refused(tmp_path):
  text = tmp_path / 'notes.txt'
  text.write_text('not a database\n' * 100)
  with pytest.raises(ValueError, match=r'notes.txt is not a TFF SqlClientData'):
    _load(str(text))
  other = tmp_path / 'other.sqlite'
  with sqlite3.connect(other) as con:
    con.execute('CREATE TABLE t (a)')
  with pytest.raises(ValueError, match=r"other.sqlite is not a TFF "
                     r"SqlClientData file \(no 'examples'"):
    _load(str(other))
  with pytest.raises(ValueError, match=r'missing.sqlite: no such file'):
    _load(str(tmp_path / 'missing.sqlite'))


def test_a_file_without_clients_is_refused(tmp_path):
  path = str(tmp_path / 'empty.sqlite')
  client_data.write_sql(path, [])
  with pytest.raises(ValueError, match=r"empty.sqlite has no clients with "
                     r"'train' examples"):
    _load(path)


def _one_example_file(path, features):
  """An SqlClientData file whose one client holds one example of
  `features` ({name: tf.train.Feature})."""
  client_data.write_sql(path, [])
  example = tf.train.Example(features=tf.train.Features(feature=features))
  with sqlite3.connect(path) as con:
    con.execute('INSERT INTO examples VALUES (?, ?, ?)',
                ('train', 'a', example.SerializeToString()))
    con.execute("INSERT INTO client_metadata VALUES ('a', 'train', 1)")
  return path


def test_examples_of_another_layout_are_refused(tmp_path):
  path = _one_example_file(str(tmp_path / 'images.sqlite'), {
      'pixels': tf.train.Feature(float_list=tf.train.FloatList(value=[1.0])),
      'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))})
  with pytest.raises(ValueError, match=r"images.sqlite: examples must have a "
                     r"float feature 'x' and one int64 label 'y', found "
                     r"label \(int64 x 1\), pixels \(float x 1\)"):
    _load(path)


def test_features_of_the_wrong_type_are_named_with_their_type(tmp_path):
  """The right names, the wrong dtypes: the error says which dtypes."""
  path = _one_example_file(str(tmp_path / 'ints.sqlite'), {
      'x': tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2, 3])),
      'y': tf.train.Feature(float_list=tf.train.FloatList(value=[1.0]))})
  with pytest.raises(ValueError, match=r"found x \(int64 x 3\), "
                     r"y \(float x 1\)\.$"):
    _load(path)


def test_bad_clients_are_named_when_read(tmp_path):
  path = _file(tmp_path / 'bad.sqlite', {
      'good': _client(4, label=2), 'nan': _client(3, value=np.nan),
      'big_label': _client(2, label=7, value=1.0)})
  task = _load(path)
  assert task.num_train_examples('good') == 4
  assert task.keras_model_fn().output_shape == (None, 3)  # labels 0..2
  with pytest.raises(ValueError, match=r"client 'nan'\'s training data has 9 "
                     r'non-finite \(NaN or inf\) features'):
    task.train_arrays('nan')
  with pytest.raises(ValueError, match=r"client 'big_label'\'s training data "
                     r'in .*bad.sqlite \(3 clients\) has labels outside '
                     r'\[0, 3\), e.g. 7 \(the model has K = 3 classes, '
                     'one more than the largest label of the server test '
                     r'set\)'):
    task.train_arrays('big_label')


def test_a_label_beyond_the_test_sets_says_where_k_comes_from(tmp_path):
  """A test split of zeros gives K = 1: a training label 1 is named with
  where K came from, not only as out of range."""
  path = _file(tmp_path / 'zeros.sqlite', {
      'a': _client(3, label=0),
      'b': ((np.full((2, 3), 0.5), np.full(2, 1)),
            (np.full((1, 3), 0.5), np.full(1, 0)))})
  task = _load(path)
  with pytest.raises(ValueError, match=r"client 'b'\'s training data .* has "
                     r'labels outside \[0, 1\), e.g. 1 \(the model has K = 1 '
                     'classes, one more than the largest label of the server '
                     'test set'):
    task.train_arrays('b')


def test_a_client_without_training_examples_is_named_when_read(tmp_path):
  path = _file(tmp_path / 'thin.sqlite', {
      'good': _client(4), 'none': ((np.zeros((0, 3)), np.zeros(0, int)),
                                   (np.ones((1, 3)), np.zeros(1, int)))})
  task = _load(path)
  with pytest.raises(ValueError, match=r"client 'none' has no training "
                     r'examples in .*thin.sqlite'):
    task.train_arrays('none')


def _folder(path, clients):
  """A FilePerUserClientData folder: train/<id> and test/<id> TFRecords."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for split, k in (('train', 0), ('test', 1)):
    os.makedirs(os.path.join(path, split))
    for c, arrays in clients.items():
      x, y = arrays[k]
      with tf.io.TFRecordWriter(os.path.join(path, split, c)) as writer:
        for row in client_data.example_rows(np.asarray(x, np.float32), y):
          writer.write(row.tobytes())
  return str(path)


def test_a_file_per_user_folder_reads_as_the_sql_file(tmp_path):
  clients = {'a': _client(4, label=2), 'b': _client(3, label=1, value=1.0),
             'c': _client(5, label=0, value=2.0)}
  sql = _load(_file(tmp_path / 'c.sqlite', clients))
  folder = _load(_folder(tmp_path / 'folder', clients))
  assert folder.client_ids == sql.client_ids == ['a', 'b', 'c']
  for c in clients:
    for got, want in ((folder.train_arrays(c), sql.train_arrays(c)),
                      (folder.test_arrays(c), sql.test_arrays(c))):
      for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
  for g, w in zip(folder.server_test, sql.server_test):
    np.testing.assert_array_equal(g, w)
  assert folder.data_digest != sql.data_digest


def test_a_folder_without_client_files_is_refused(tmp_path):
  (tmp_path / 'empty').mkdir()
  with pytest.raises(ValueError, match=r'empty has no client files in '
                     r'.*empty/train/'):
    _load(str(tmp_path / 'empty'))
  (tmp_path / 'csv' / 'train').mkdir(parents=True)
  (tmp_path / 'csv' / 'train' / 'a').write_text('x,y\n1,2\n')
  with pytest.raises(ValueError, match=r'train/a is not a TFRecord file'):
    _load(str(tmp_path / 'csv'))


def test_a_client_of_another_feature_count_is_named_when_read(tmp_path):
  path = _file(tmp_path / 'wide.sqlite', {'good': _client(4)})
  wide = client_data.example_rows(np.ones((2, 5), np.float32), np.zeros(2, int))
  with sqlite3.connect(path) as con:
    con.executemany('INSERT INTO examples VALUES (?, ?, ?)',
                    [('train', 'wide', r.tobytes()) for r in wide])
    con.execute("INSERT INTO client_metadata VALUES ('wide', 'train', 2)")
  task = _load(path)
  with pytest.raises(ValueError, match=r"client 'wide'\'s training data in "
                     r".*wide.sqlite \(2 clients\) cannot be read: .*Number "
                     r'of float values != expected\.  Values size: 5 but '
                     r'output shape: \[3\]\.$'):
    task.train_arrays('wide')


def test_a_written_file_is_its_owners_alone(tmp_path):
  """It holds the clients' raw examples: 0600 whatever the umask."""
  old = os.umask(0o022)
  try:
    path = _file(tmp_path / 'c.sqlite', {'a': _client(3)})
  finally:
    os.umask(old)
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
  assert os.listdir(tmp_path) == ['c.sqlite']


def _tff_file(path, splits, seed=0):
  """A file written by TFF's own `save_to_sql_client_data`: 20 clients of
  5-8 examples (3 features, labels 0-3), each id in the split `splits`
  gives it (None: TFF's 'default_split'); no index, as TFF writes it."""
  import collections  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  ids = [f'c{i:02d}' for i in range(20)]
  data = {c: (rng.normal(size=(5 + i % 4, 3)).astype(np.float32),
              rng.integers(0, 4, 5 + i % 4)) for i, c in enumerate(ids)}
  tff.simulation.datasets.save_to_sql_client_data(
      ids, lambda c: tf.data.Dataset.from_tensor_slices(
          collections.OrderedDict(x=data[c][0], y=data[c][1])), str(path),
      split_names_by_client_id=splits and {c: splits(i)
                                           for i, c in enumerate(ids)})
  return str(path), data


@pytest.mark.parametrize('layout', ['test_clients', 'train_only',
                                    'default_split'])
def test_every_layout_tffs_writer_makes_trains(tmp_path, layout):
  """Train clients with test clients of their own: the test clients'
  examples are the server's test set. Train only, or TFF's 'default_split':
  a seeded tenth of the clients is held out, never trained on, and its
  examples are the server's test set. Either way the notes say so, and the
  unindexed file is read through an indexed copy in the cache."""
  splits = {'test_clients': lambda i: 'test' if i >= 15 else 'train',
            'train_only': lambda i: 'train', 'default_split': None}[layout]
  path, data = _tff_file(tmp_path / f'{layout}.sqlite', splits)
  before = client_data.file_fingerprint(path)
  task = client_data.load_task(path, 'tff_written', 2,
                               cache_folder=str(tmp_path / 'cache'))
  if layout == 'test_clients':
    trained, tested = sorted(data)[:15], sorted(data)[15:]
    assert 'its \'test\' clients are others' in task.clients.notes[-1]
  else:
    held = set(client_data.seeded_subset(sorted(data), 2))
    trained = [c for c in sorted(data) if c not in held]
    tested = sorted(held)
    assert 'are the server\'s test set, and they are not trained on' in (
        task.clients.notes[-1])
  assert task.client_ids == trained
  x, y = task.server_test
  assert sorted(map(tuple, x.tolist())) == sorted(
      tuple(row) for c in tested for row in data[c][0].tolist())
  assert 'has no index on examples(client_id, split_name)' in (
      task.clients.notes[0])
  assert client_data.file_fingerprint(path) == before  # not modified
  np.testing.assert_array_equal(task.train_arrays(trained[3])[0],
                                data[trained[3]][0])
  assert all(len(task.test_arrays(c)[1]) == 0 for c in trained)
  rounds, _ = seeded_fedhdp_run(task, str(tmp_path / 'run'), rounds=2,
                                rate=0.5)
  assert rounds.count('\n') == 3
  header, *rows = [r.split(',') for r in rounds.splitlines()]
  acc = rows[-1][header.index('acc_g')]
  assert 0 <= float(acc) <= 100


def test_write_sql_without_an_index_writes_the_same_rows(tmp_path):
  """`indexed=False` (TFF's writer's layout, what the setup benchmark
  times): the same rows and metadata, no index, and the file is read
  through an indexed copy to the same clients and examples."""
  rng = np.random.default_rng(0)
  owner = np.repeat(np.arange(4), [3, 4, 2, 5])
  chunk = (['a', 'b', 'c', 'd'], rng.random((14, 3), np.float32),
           rng.integers(0, 5, 14), owner, np.array([2, 3, 1, 4]))
  paths = {}
  for indexed in (True, False):
    paths[indexed] = str(tmp_path / f'{indexed}.sqlite')
    client_data.write_sql(paths[indexed], [chunk], indexed=indexed)

  def contents(path):
    with sqlite3.connect(path) as con:
      return [sorted(con.execute(f'SELECT * FROM {table}'))
              for table in ('examples', 'client_metadata')], list(
                  con.execute("PRAGMA index_list('examples')"))

  (rows, index), (plain_rows, no_index) = contents(paths[True]), contents(
      paths[False])
  assert plain_rows == rows and len(rows[0]) == 14 and index and not no_index
  tasks_read = [client_data.load_task(paths[i], 'w', 2, cache_folder=str(
      tmp_path / 'cache')) for i in (True, False)]
  assert 'has no index' in tasks_read[1].clients.notes[0]
  assert tasks_read[0].client_ids == tasks_read[1].client_ids == list('abcd')
  for c in 'abcd':
    for a, b in zip(tasks_read[0].train_arrays(c),
                    tasks_read[1].train_arrays(c)):
      np.testing.assert_array_equal(a, b)


def test_the_index_is_built_once_in_the_cache(tmp_path):
  """An unindexed file is read through one indexed copy, built on first use
  and reused; a file with an index is read as it is."""
  path, _ = _tff_file(tmp_path / 'plain.sqlite', lambda i: 'train')
  cache = tmp_path / 'cache'
  client_data.load_task(path, 'a', 2, cache_folder=str(cache))
  copies = list(cache.glob('*.sqlite'))
  assert len(copies) == 1 and stat.S_IMODE(copies[0].stat().st_mode) == 0o600
  built = copies[0].stat().st_mtime_ns
  again = client_data.load_task(path, 'a', 2, cache_folder=str(cache))
  assert copies[0].stat().st_mtime_ns == built
  assert str(copies[0]) in again.clients.notes[0]
  with sqlite3.connect(copies[0]) as con:
    plan = ' '.join(str(r) for r in con.execute(
        "EXPLAIN QUERY PLAN SELECT serialized_example_proto FROM examples "
        "WHERE client_id = 'c01' AND split_name = 'train'"))
  assert 'USING INDEX' in plan
  indexed = population.cached_file(50, 0, str(tmp_path))
  assert not client_data.load_task(indexed, 'p', 2,
                                   cache_folder=str(cache)).clients.notes
  assert len(list(cache.glob('*.sqlite'))) == 1


@pytest.mark.parametrize('damage', [b'', b'not a database' * 100])
def test_an_empty_or_broken_copy_in_the_cache_is_built_again(tmp_path,
                                                             damage):
  """A copy removed while a run read it comes back empty (TFF's reader
  creates the database it is pointed at): the next run rebuilds it instead
  of stopping at 'no such table: examples'."""
  path, data = _tff_file(tmp_path / 'plain.sqlite', lambda i: 'train')
  cache = tmp_path / 'cache'
  client_data.load_task(path, 'a', 2, cache_folder=str(cache))
  [copy] = cache.glob('*.sqlite')
  copy.write_bytes(damage)
  task = client_data.load_task(path, 'a', 2, cache_folder=str(cache))
  assert str(copy) in task.clients.notes[0]
  some = task.client_ids[0]
  np.testing.assert_array_equal(task.train_arrays(some)[0], data[some][0])


def test_an_index_cache_that_cannot_be_written_is_named(tmp_path):
  path, _ = _tff_file(tmp_path / 'plain.sqlite', lambda i: 'train')
  (tmp_path / 'a_file').write_text('')
  with pytest.raises(ValueError, match='the task cache .*a_file cannot be '
                     r'written \(it is a file, not a folder\); set '
                     r'\$TFF_HDP_CACHE'):
    client_data.load_task(path, 'a', 2, cache_folder=str(tmp_path / 'a_file'))


def test_a_file_with_other_splits_or_mixed_test_clients_is_one_line(tmp_path):
  path, _ = _tff_file(tmp_path / 'three.sqlite',
                      lambda i: ('train', 'test', 'holdout')[i % 3])
  with pytest.raises(ValueError, match=r"three.sqlite has the splits "
                     r"\['holdout', 'test', 'train'\]; a run reads 'train'"):
    _load(path)
  mixed = _file(tmp_path / 'mixed.sqlite', {'a': _client(3), 'b': _client(4)})
  with sqlite3.connect(mixed) as con:
    con.execute("INSERT INTO client_metadata VALUES ('z', 'test', 1)")
  with pytest.raises(ValueError, match=r"some 'test' clients also have "
                     r"'train' examples and some do not"):
    _load(mixed)


def test_a_label_too_large_for_a_model_is_refused(tmp_path):
  """K is one more than the largest label: a stray 10^9 would size a model
  of 10^9 outputs (a 99-line gRPC error), so it is refused naming it."""
  path = _file(tmp_path / 'huge.sqlite', {'a': _client(3), 'b': _client(2)})
  huge = tf.train.Example(features=tf.train.Features(feature={
      'x': tf.train.Feature(float_list=tf.train.FloatList(value=[0.0] * 3)),
      'y': tf.train.Feature(int64_list=tf.train.Int64List(value=[10**9]))}))
  with sqlite3.connect(path) as con:
    con.execute("UPDATE examples SET serialized_example_proto = ? WHERE "
                "client_id = 'b' AND split_name = 'test'",
                (huge.SerializeToString(),))
  with pytest.raises(ValueError, match=r'huge.sqlite: its test examples hold '
                     r'the label 1000000000; labels are class indices, at '
                     r'most 65535'):
    _load(path)


def _execute(path, sql, *parameters):
  """Runs one SQL statement on the file at `path` (to damage it)."""
  with sqlite3.connect(path) as con:
    con.execute(sql, parameters)


def _last_record_size(data: bytes) -> int:
  """The bytes of the last record of a TFRecord file's `data`."""
  position = 0
  while True:
    size = struct.unpack('<Q', data[position:position + 8])[0] + 16
    if position + size >= len(data):
      return size
    position += size


def test_damaged_files_are_one_line_naming_the_file_and_client(tmp_path):
  clients = {'a': _client(4, label=2), 'b': _client(3, label=1)}
  folder = _folder(tmp_path / 'folder', clients)
  data = open(os.path.join(folder, 'train', 'b'), 'rb').read()
  with open(os.path.join(folder, 'train', 'b'), 'wb') as f:
    f.write(data[:-7])  # cut short inside the last record's data
  with pytest.raises(ValueError, match=r"client 'b'\'s train file .*folder/"
                     r'train/b is cut short inside its last record'):
    _load(folder)
  # Inside the last record's header, where TF's reader would stop at the
  # record before without a word.
  last = len(data) - _last_record_size(data)
  with open(os.path.join(folder, 'train', 'b'), 'wb') as f:
    f.write(data[:last + 5])
  assert sum(1 for _ in tf.data.TFRecordDataset(
      os.path.join(folder, 'train', 'b'))) == 2  # TF reads 2 of 3, silently
  with pytest.raises(ValueError, match=r"client 'b'\'s train file .*folder/"
                     r'train/b is cut short inside the header of the record '
                     rf'at byte {last} of its {last + 5}'):
    _load(folder)
  path = _file(tmp_path / 'rows.sqlite', clients)
  _execute(path, "UPDATE examples SET serialized_example_proto = X'ff00ff' "
           "WHERE client_id = 'b' AND split_name = 'train'")
  with pytest.raises(ValueError, match=r"client 'b'\'s training data in "
                     r'.*rows.sqlite \(2 clients\) cannot be read: an '
                     r'example is not a serialized tf.train.Example'):
    _load(path).train_arrays('b')
  renamed = _file(tmp_path / 'names.sqlite', clients)
  other = tf.train.Example(features=tf.train.Features(feature={
      'features': tf.train.Feature(float_list=tf.train.FloatList(
          value=[1.0, 2.0, 3.0])),
      'y': tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))}))
  _execute(renamed, "UPDATE examples SET serialized_example_proto = ? WHERE "
           "client_id = 'b'", other.SerializeToString())
  with pytest.raises(ValueError, match=r"client 'b'\'s test data in "
                     r'.*names.sqlite \(2 clients\) cannot be read: Feature: '
                     r'x \(data type: float\) is required but could not be '
                     r'found\.$'):
    _load(renamed)
  _execute(path, "UPDATE client_metadata SET client_id = CAST(X'ff61' AS "
           "TEXT) WHERE client_id = 'a'")
  with pytest.raises(ValueError, match=r'rows.sqlite is not a TFF '
                     r'SqlClientData file, or a damaged one \(Could not '
                     r"decode to UTF-8 column 'client_id'"):
    _load(path)
