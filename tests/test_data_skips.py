"""A test skipped for a missing data set names the file; under CI it fails
the run (tests/conftest.py), so CI cannot pass without the data tests."""

import os
import subprocess
import sys

import pytest

from tests import repository

pytestmark = pytest.mark.tf


def _pytest_without_data(tmp_path, ci: bool):
  env = dict(os.environ, TFF_HDP_DATA=str(tmp_path / 'no_data_here'))
  env.pop('CI', None)
  if ci:
    env['CI'] = 'true'
  return subprocess.run(
      [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
       'tests/tasks/test_femnist_leaf.py'],
      cwd=repository.ROOT, env=env, capture_output=True, text=True,
      timeout=600)


@pytest.mark.parametrize('ci,status', [(False, 0), (True, 1)])
def test_missing_data_is_named_and_fails_only_under_ci(tmp_path, ci, status):
  result = _pytest_without_data(tmp_path, ci)
  assert result.returncode == status, result.stdout[-3000:]
  assert 'tests skipped for a missing data set' in result.stdout
  assert (f'missing data set: {tmp_path}/no_data_here/femnist_leaf'
          in result.stdout)
  assert ('CI is set: every data test must run' in result.stdout) == ci
