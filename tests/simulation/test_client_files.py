"""Examples read from local files are the examples the task would send: the
same batches in the same order for every seed, so a run gives the same
model either way; and the files go when the run ends."""

import os

import numpy as np
import pytest

from tff_hdp.tasks import digits
from tests.simulation.test_cross_silo_setting import _clustered_task
from tff_hdp.federated_task import TaskOptions
from tff_hdp.simulation import client_files
from tff_hdp.simulation import untrusted_setting

pytestmark = pytest.mark.tf


def _batches(dataset):
  return [tuple(np.asarray(t) for t in batch) for batch in dataset]


@pytest.mark.parametrize('task', [
    digits.load_task(TaskOptions(num_clients=10, batch_size=7)),  # y [n] int
    _clustered_task(num_silos=2),  # y [n, 1] float32
], ids=['digits', 'column_labels'])
def test_file_datasets_equal_the_task_datasets(task):
  files = client_files.ClientFiles(task)
  for client in task.client_ids[:2]:
    for seed in (0, 3):
      read = files.train_dataset(client, seed)
      sent = task.train_dataset(client, seed)
      assert read.element_spec == sent.element_spec
      got, expected = _batches(read), _batches(sent)
      assert len(got) == len(expected) > 1
      for a, b in zip(got, expected):
        for x, y in zip(a, b):
          assert x.dtype == y.dtype
          np.testing.assert_array_equal(x, y)
  # Another seed, another order.
  x0 = _batches(files.train_dataset(task.client_ids[0], 0))[0][0]
  x3 = _batches(files.train_dataset(task.client_ids[0], 3))[0][0]
  assert not np.array_equal(x0, x3)
  files.close()


def test_the_files_are_private_and_go_on_close():
  task = digits.load_task(TaskOptions(num_clients=10))
  files = client_files.ClientFiles(task)
  files.train_dataset(task.client_ids[0], 0)
  directory = files._directory  # pylint: disable=protected-access
  assert os.stat(directory).st_mode & 0o077 == 0
  assert len(os.listdir(directory)) == 2  # x and y
  files.close()
  assert not os.path.exists(directory)


def test_a_run_reading_files_trains_the_model_a_sending_run_does(monkeypatch):
  task = digits.load_task(TaskOptions(num_clients=10))
  settings = untrusted_setting.UntrustedSettings(
      rounds=2, epsilon_distribution='uniform', eval_every=2,
      unsafe_seeded_dp_randomness=True)
  summaries, made = [], []
  real = client_files.ClientFiles

  def counting(*args):
    made.append(1)
    return real(*args)

  monkeypatch.setattr(untrusted_setting.client_files, 'ClientFiles', counting)
  for share in (True, False):
    monkeypatch.setattr(untrusted_setting.runtime, 'workers_share_disk',
                        lambda share=share: share)
    summaries.append(untrusted_setting.run_algorithm(
        task, 'weiavg', settings, None, progress=False))
  assert made == [1]  # files for the local worker only
  assert summaries[0]['metrics'] == summaries[1]['metrics']
  assert summaries[0]['metrics']['acc_g'] > 0.2  # it trained
