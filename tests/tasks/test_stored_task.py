"""A task whose clients the TFF workers read from a file (`stored_task`)
runs exactly as the task holding them in memory, in every setting (trusted,
untrusted, cross-silo); a file written for other data, and labels the
layout cannot hold, are refused."""

import dataclasses
import os
import sqlite3

import numpy as np
import pytest

from tff_hdp.tasks import client_data, digits
from tff_hdp.federated_task import TaskOptions
from tff_hdp.simulation import cross_silo_setting, untrusted_setting
from tests.simulation import test_cross_silo_setting
from tests.simulation.test_cross_silo_setting import _clustered_task
from tests.tasks.test_client_data import seeded_fedhdp_run

pytestmark = pytest.mark.tf


def _digits(**options):
  return digits.load_task(TaskOptions(num_clients=10, batch_size=8,
                                      **options))


@pytest.mark.parametrize('cohort_size', [0, 4])
def test_a_stored_task_trains_as_the_task_in_memory(tmp_path, cohort_size):
  task = _digits()
  stored = client_data.stored_task(task, str(tmp_path / 'digits.sqlite'))
  assert stored.clients.workers_read and not task.clients.workers_read
  assert stored.data_digest == task.data_digest  # one run, resumable
  assert stored.client_ids == task.client_ids
  for c in task.client_ids[:3]:
    for got, want in zip(stored.test_arrays(c), task.test_arrays(c)):
      assert got.dtype == want.dtype
      np.testing.assert_array_equal(got, want)
  rounds, model = seeded_fedhdp_run(task, str(tmp_path / 'memory'),
                                    cohort_size, rounds=2, rate=0.5)
  got_rounds, got_model = seeded_fedhdp_run(stored, str(tmp_path / 'stored'),
                                            cohort_size, rounds=2, rate=0.5)
  assert got_rounds == rounds and rounds.count('\n') == 3
  for k in model:
    np.testing.assert_array_equal(got_model[k], model[k])


def test_an_untrusted_run_of_a_stored_task_equals_the_task_in_memory(tmp_path):
  task = _digits()
  stored = client_data.stored_task(task, str(tmp_path / 'digits.sqlite'))
  settings = untrusted_setting.UntrustedSettings(
      rounds=2, epsilon_distribution='uniform', eval_every=2,
      unsafe_seeded_dp_randomness=True, checkpoint_every=0)
  summaries = [untrusted_setting.run_algorithm(t, 'weiavg', settings, None,
                                               progress=False)
               for t in (task, stored)]
  assert summaries[0]['metrics'] == summaries[1]['metrics']
  assert summaries[0]['metrics']['acc_g'] > 0.2  # it trained


def test_a_file_of_other_data_is_refused_saying_what_it_is(tmp_path):
  """Written for other data: name another file. A user's own ClientData,
  another SQLite file, a text file or a folder is diagnosed as what it is
  (never the advice to delete it)."""
  path = str(tmp_path / 'digits.sqlite')
  client_data.stored_task(_digits(), path)
  with pytest.raises(ValueError, match=r"digits.sqlite was written by this "
                     r"option for other data than task 'digits' with these "
                     r'options; name another file'):
    client_data.stored_task(_digits(seed=1), path)
  mine = str(tmp_path / 'mine.sqlite')
  client_data.write_sql(mine, [])  # a ClientData file, but not a task's
  text, other = tmp_path / 'notes.txt', tmp_path / 'other.sqlite'
  text.write_text('not a database\n' * 100)
  with sqlite3.connect(other) as con:
    con.execute('CREATE TABLE t (a)')
  for given, message in (
      (mine, r'mine.sqlite is a ClientData file this option did not write; '
             r'to train on its clients use --client_data=.*mine.sqlite'),
      (str(text), r'notes.txt is not a file this option wrote \(not an '
                  r'SQLite file\)'),
      (str(other), r'other.sqlite is an SQLite file this option did not '
                   r'write'),
      (str(tmp_path), r'is a folder; name the file')):
    with pytest.raises(ValueError, match=message) as raised:
      client_data.stored_task(_digits(), given)
    assert 'delete' not in str(raised.value)


@pytest.mark.parametrize('algorithm', ['mrmtl', 'ifca'])
def test_a_cross_silo_run_of_a_stored_task_equals_the_task_in_memory(
    tmp_path, algorithm):
  task = _clustered_task(num_silos=4)  # float labels [n, 1]
  stored = client_data.stored_task(task, str(tmp_path / 'silos.sqlite'))
  for c in task.client_ids[:2]:
    for got, want in zip(stored.train_arrays(c), task.train_arrays(c)):
      assert got.dtype == want.dtype and got.shape == want.shape
      np.testing.assert_array_equal(got, want)
  settings = test_cross_silo_setting._settings(  # pylint: disable=protected-access
      rounds=2, checkpoint_every=0)
  summaries = [cross_silo_setting.run_algorithm(t, algorithm, settings, None,
                                                progress=False)
               for t in (task, stored)]
  for key in ('metric', 'silos', 'final_clusters'):
    assert summaries[0].get(key) == summaries[1].get(key), key
  assert summaries[0]['metric'] is not None


def test_labels_float32_cannot_hold_are_refused(tmp_path):
  task = _clustered_task(num_silos=2)
  train = {c: (x, y.astype(np.float64) + 0.1)
           for c, (x, y) in task.client_train.items()}
  inexact = dataclasses.replace(task, client_train=train)
  with pytest.raises(ValueError, match=r"task 'clustered': its labels are "
                     r'neither classes in \[0, 128\) nor values float32 '
                     r'holds exactly'):
    client_data.stored_task(inexact, str(tmp_path / 'silos.sqlite'))
  assert not os.listdir(tmp_path)  # nothing half-written left behind
