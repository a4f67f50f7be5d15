"""The per-cluster weighted mean (`ClusterMeanFactory`), the server rule of the
cross-silo methods, in TFF's two halves: its type signatures show a stateless
server that receives each silo's update with its `[G]` cluster weight and
returns the G cluster means stacked along a leading axis; its execution gives
numpy's weighted mean in each cluster, a zero mean for a cluster nobody chose,
and ignores a client of zero weight. Packed clients (updates stacked `[K, ...]`
with `[K, G]` weights) get the means of the same clients one by one. A weight
of another type is refused."""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from tests.aggregators import signatures
from tests.aggregators.signatures import VALUE
from tff_hdp.aggregators.cluster_mean import ClusterMeanFactory

pytestmark = pytest.mark.tf

G = 3
WEIGHT = tff.TensorType(np.float32, [G])


def test_type_signatures_show_a_stateless_server_with_a_mean_per_cluster():
  per_cluster = tff.TensorType(np.float32, [G])
  signatures.assert_signatures(
      ClusterMeanFactory(G).create(VALUE, WEIGHT), state=(),
      client_inputs={'value': VALUE, 'weight': WEIGHT},
      result=collections.OrderedDict(  # one mean per cluster
          w=tff.TensorType(np.float32, [G, 2, 2]),
          b=tff.TensorType(np.float32, [G, 3])),
      measurements=collections.OrderedDict(
          cluster_weights=per_cluster, cluster_client_counts=per_cluster))


def test_execution_gives_weighted_cluster_means_and_zero_for_an_empty_one():
  rng = np.random.default_rng(0)
  clusters = [0, 2, 0, 0, 2]
  own_weights = [1.0, 2.0, 3.0, 4.0, 0.0]  # the last client is dropped
  values = [{'w': rng.normal(size=(2, 2)).astype(np.float32),
             'b': rng.normal(size=3).astype(np.float32)} for _ in clusters]
  values[-1] = {'w': np.full((2, 2), 1e6, np.float32),
                'b': np.full(3, 1e6, np.float32)}
  weights = [np.eye(G, dtype=np.float32)[g] * n
             for g, n in zip(clusters, own_weights)]
  process = ClusterMeanFactory(G).create(VALUE, WEIGHT)
  output = process.next(process.initialize(), values, weights)
  for key in ('w', 'b'):
    for g in range(G):
      members = [i for i, c in enumerate(clusters)
                 if c == g and own_weights[i] > 0]
      expected = (np.average([values[i][key] for i in members], axis=0,
                             weights=[own_weights[i] for i in members])
                  if members else np.zeros_like(values[0][key]))
      np.testing.assert_allclose(output.result[key][g], expected, rtol=1e-5)
  np.testing.assert_allclose(output.measurements['cluster_weights'],
                             [8.0, 0.0, 2.0])
  np.testing.assert_allclose(output.measurements['cluster_client_counts'],
                             [3.0, 0.0, 1.0])


def _stacked_type(value_type):
  return tff.types.to_type(collections.OrderedDict(
      (k, tff.TensorType(t.dtype, [None] + list(t.shape)))
      for k, t in tff.structure.iter_elements(value_type)))


def test_packed_clients_get_the_means_of_the_same_clients_one_by_one():
  rng = np.random.default_rng(1)
  clusters = [0, 2, 0, 1, 2, 0, 1]
  own_weights = [1.0, 2.0, 3.0, 4.0, 0.0, 5.0, 6.0]
  values = [{'w': rng.normal(size=(2, 2)).astype(np.float32),
             'b': rng.normal(size=3).astype(np.float32)} for _ in clusters]
  weights = [np.eye(G, dtype=np.float32)[g] * n
             for g, n in zip(clusters, own_weights)]
  one_by_one = ClusterMeanFactory(G).create(VALUE, WEIGHT)
  expected = one_by_one.next(one_by_one.initialize(), values, weights)
  packed = ClusterMeanFactory(G).create(
      _stacked_type(VALUE), tff.TensorType(np.float32, [None, G]))
  cuts = [(0, 3), (3, 7)]  # two packed clients of 3 and 4
  output = packed.next(packed.initialize(), [
      {k: np.stack([v[k] for v in values[a:b]]) for k in ('w', 'b')}
      for a, b in cuts], [np.stack(weights[a:b]) for a, b in cuts])
  for key in ('w', 'b'):
    np.testing.assert_allclose(output.result[key], expected.result[key],
                               rtol=1e-6, atol=1e-7)
  for key in ('cluster_weights', 'cluster_client_counts'):
    np.testing.assert_array_equal(output.measurements[key],
                                  expected.measurements[key])


def test_a_weight_that_is_not_a_float32_vector_of_g_is_refused():
  with pytest.raises(TypeError, match=r'ClusterMeanFactory\(3\) takes weights'):
    ClusterMeanFactory(G).create(VALUE, tff.TensorType(np.float32, [2]))
  with pytest.raises(TypeError, match='stacked weights need values stacked'):
    ClusterMeanFactory(G).create(VALUE, tff.TensorType(np.float32, [None, G]))
  with pytest.raises(ValueError, match='number of clusters must be >= 1'):
    ClusterMeanFactory(0)
