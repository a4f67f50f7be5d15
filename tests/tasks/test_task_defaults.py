"""--num_clients: each task's default as --help states it (`tasks.REGISTRY`)
is the number its loader takes, and a count a task cannot split names the
flag."""

import pytest

from tff_hdp import tasks
from tff_hdp.tasks import cross_silo
from tff_hdp.tasks import mnist
from tff_hdp.tasks import population
from tff_hdp.federated_task import TaskOptions
from tests import repository

pytestmark = pytest.mark.tf


def test_the_registry_states_each_loader_default():
  # The tasks that make their own data, loaded; the others' constants.
  for name in ('digits', 'linear_regression'):
    task = tasks.load(name, TaskOptions())
    assert len(task.client_ids) == tasks.REGISTRY[name].num_clients, name
  expected = {'mnist_noniid': mnist.NUM_CLIENTS,
              'mnist_noniid_skewed': mnist.NUM_CLIENTS,
              'mnist_iid': mnist.IID_CLIENTS,
              'fashion_mnist_iid': mnist.IID_CLIENTS,
              'fashion_mnist_noniid': mnist.NUM_CLIENTS,
              'rotated_masked_mnist': cross_silo.NUM_MNIST_SILOS,
              'population': population.DEFAULT_CLIENTS,
              'digits': 100, 'linear_regression': 100}
  stated = {name: task.num_clients for name, task in tasks.REGISTRY.items()
            if task.num_clients is not None}
  assert stated == expected


def test_help_shows_the_defaults():
  result = repository.run_program('run_experiment.py', '--help')
  assert result.returncode == 0
  text = ' '.join(result.stdout.split())
  assert ('Default: the task\'s own, digits 100, fashion_mnist_iid 20, '
          'fashion_mnist_noniid 2,000, '
          'linear_regression 100, mnist_iid 20, mnist_noniid 2,000, '
          'mnist_noniid_skewed 2,000, population 1,000, rotated_masked_mnist '
          '40; every client of the data for the others (refused by gleam, '
          'school, vehicle, whose silos are fixed).') in text


@pytest.mark.parametrize('flags,message', [
    (['--num_clients=10000'], '--num_clients=10000: 1000 clients per digit '
     'leaves fewer than 2 examples per client.'),
    (['--task=mnist_noniid', '--num_clients=15'], '--num_clients: non-IID '
     'MNIST needs a positive multiple of 10 clients, got 15.'),
    (['--task=mnist_iid', '--num_clients=50000', '--algorithms=weiavg'],
     '--num_clients=50000 leaves fewer than 2 MNIST images per client.'),
    (['--task=rotated_masked_mnist', '--num_clients=6',
      '--algorithms=local'], '--num_clients: rotated MNIST needs a positive '
     'multiple of 4 silos, got 6.'),
])
def test_a_count_the_task_cannot_split_names_the_flag(flags, message,
                                                      tmp_path):
  # The default --data_dir: the advice to pass one is for its errors only.
  repository.task_data('mnist_noniid')
  result = repository.run_program('run_experiment.py', *flags,
                                  f'--output_dir={tmp_path}/out')
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert lines[-1].startswith('run_experiment.py: error: --task='), lines
  assert lines[-1].endswith(message), lines[-1]
