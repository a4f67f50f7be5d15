"""The coordinate-wise median rule, in TFF's two halves (type signatures, then
execution), and the claim that a registered rule is selectable from the
command line without editing any driver."""

import collections
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators.coordinate_median import CoordinateMedianFactory
from tff_hdp.aggregators.coordinate_median import coordinate_median
from tff_hdp.learning import algorithms
from tff_hdp.learning import noise_aware
from tests import repository

pytestmark = pytest.mark.tf

ROOT = repository.ROOT
# As a model update reaches an aggregator: a Python container of tensors.
VALUE = tff.types.to_type(collections.OrderedDict(
    w=tff.TensorType(np.float32, [2, 2]), b=tff.TensorType(np.float32, [3])))


def test_type_signatures_show_a_stateless_server_that_sees_only_updates():
  process = CoordinateMedianFactory().create(VALUE)
  assert str(process.initialize.type_signature) == '( -> <>@SERVER)'
  next_type = process.next.type_signature
  assert next_type.parameter[1] == tff.FederatedType(VALUE, tff.CLIENTS)
  assert next_type.result.result == tff.FederatedType(VALUE, tff.SERVER)
  assert next_type.result.measurements == tff.FederatedType((), tff.SERVER)


def test_non_float_values_are_refused():
  with pytest.raises(TypeError, match='float values'):
    CoordinateMedianFactory().create(tff.TensorType(np.int32, [3]))


@pytest.mark.parametrize('num_clients', [1, 4, 5])
def test_execution_gives_numpy_median_of_each_coordinate(num_clients):
  rng = np.random.default_rng(num_clients)
  values = [{'w': rng.normal(size=(2, 2)).astype(np.float32),
             'b': rng.normal(size=3).astype(np.float32)}
            for _ in range(num_clients)]
  process = CoordinateMedianFactory().create(VALUE)
  output = process.next(process.initialize(), values)
  for key in ('w', 'b'):
    np.testing.assert_allclose(
        output.result[key], np.median([v[key] for v in values], axis=0),
        rtol=1e-6)


def test_median_ignores_a_minority_of_huge_values():
  rows = tf.constant([[1.0, -2.0], [2.0, 1e9], [3.0, 0.0]])
  np.testing.assert_allclose(coordinate_median(rows), [2.0, 0.0])


def test_registry_record_builds_a_weighted_wrapper_for_the_process():
  assert algorithms.REGISTRY['median'].setting == algorithms.UNTRUSTED
  factory = noise_aware.build_aggregator('median')
  assert isinstance(factory, tff.aggregators.WeightedAggregationFactory)
  process = factory.create(VALUE, tff.TensorType(np.float32))
  output = process.next(process.initialize(),
                        [{'w': np.full((2, 2), v, np.float32),
                          'b': np.full(3, v, np.float32)} for v in (1, 7, 2)],
                        [100.0, 1.0, 1.0])  # weights are ignored
  np.testing.assert_allclose(output.result['b'], [2.0, 2.0, 2.0])


def test_a_rule_registered_by_user_code_runs_from_the_cli(tmp_path):
  """One `register` call, no driver edit: the rule is a valid --algorithms
  value, trains through the untrusted setting and gets its own files."""
  script = tmp_path / 'my_experiment.py'
  script.write_text(textwrap.dedent(f"""
      import sys
      sys.path.insert(0, {ROOT!r})
      import tff_hdp
      from tff_hdp.aggregators.coordinate_median import CoordinateMedianFactory
      from tff_hdp.learning import algorithms
      algorithms.register(algorithms.Algorithm(
          'user_median', algorithms.UNTRUSTED, 'a median from user code',
          CoordinateMedianFactory))
      from tff_hdp.cli import run_experiment
      run_experiment.run()
  """))
  result = subprocess.run(
      [sys.executable, str(script), '--num_clients=10',
       '--algorithms=user_median', '--rounds=2', '--eval_every=1',
       '--epsilon_distribution=uniform', f'--output_dir={tmp_path}/out'],
      cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-2000:]
  assert '| user_median' in result.stdout
  with open(tmp_path / 'out' / 'user_median' / 'summary.json') as f:
    summary = json.load(f)
  assert summary['configuration'] == 'user_median'
  assert 0 <= summary['metrics']['acc_g'] <= 100


def test_registering_a_taken_name_is_refused():
  with pytest.raises(ValueError, match="'median' exists"):
    algorithms.register(algorithms.Algorithm(
        'median', algorithms.UNTRUSTED, 'again', CoordinateMedianFactory))
