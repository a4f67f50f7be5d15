"""Per-cluster weighted means of client updates (MR-MTL, FedAvg, IFCA servers).

The server of the cross-silo methods (SPEC.md §2) averages the silos' model
updates, optionally weighted by example counts; IFCA does so separately in each
cluster. One factory covers all of them: a client's weight is a `[G]` vector,
its cluster's one-hot times its own weight (n_k, or 1 for an unweighted mean),
and the result stacks the G cluster means along a leading axis. With G = 1 it
is the ordinary weighted mean. A cluster nobody chose this round gets a zero
mean, so its model stays where it is.

A packed TFF client (several silos in one, `tff_hdp.learning.execution`)
passes its silos' updates stacked `[K, ...]` with `[K, G]` weights; its
weighted sums are formed inside it, so the means are those of the silos
one by one, up to the order of the floating-point sums.
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import stacking


class ClusterMeanFactory(tff.aggregators.WeightedAggregationFactory):
  """Weighted mean of each cluster's updates; weights are `[G]` float32."""

  def __init__(self, num_clusters: int = 1) -> None:
    """Initializes `ClusterMeanFactory`.

    Args:
      num_clusters: G, the number of clusters; 1 is the ordinary weighted
        mean.

    Raises:
      ValueError: if `num_clusters` is less than 1.
    """
    if num_clusters < 1:
      raise ValueError(f'number of clusters must be >= 1, got {num_clusters}.')
    self._num_clusters = num_clusters

  @property
  def num_clusters(self) -> int:
    return self._num_clusters

  def _check_weight_type(self, weight_type) -> bool:
    """Whether `weight_type` is stacked (`[None, G]`); raises if it is
    neither that nor `[G]`."""
    g = self._num_clusters
    one, stacked = (tff.TensorType(np.float32, shape)
                    for shape in ([g], [None, g]))
    if weight_type not in (one, stacked):
      raise TypeError(f'ClusterMeanFactory({g}) takes weights of type {one} '
                      f'(or {stacked} for stacked updates), got {weight_type}.')
    return weight_type == stacked

  def create(self, value_type: tff.types.TensorType | tff.StructType,
             weight_type: tff.types.TensorType
             ) -> tff.templates.AggregationProcess:
    """Builds the process for values of `value_type`.

    Args:
      value_type: a client's update, a float32 tensor or a structure of them
        (stacked weights: each leaf with a leading `None` dimension).
      weight_type: float32[G], a client's cluster one-hot times its own
        weight, or float32[None, G] for stacked updates.

    Returns:
      A stateless `tff.templates.AggregationProcess` whose result stacks the
      G cluster means along a leading axis (each leaf [G] + its shape) and
      whose measurements are each cluster's total weight
      (`cluster_weights`) and number of clients of positive weight
      (`cluster_client_counts`).

    Raises:
      TypeError: if `weight_type` is neither float32[G] nor float32[None, G],
        or stacked weights come with a value whose leaves are not stacked.
    """
    g = self._num_clusters
    stacked = self._check_weight_type(weight_type)
    value_type = tff.types.to_type(value_type)
    one_type = value_type
    if stacked:
      leaves = tf.nest.flatten(tff.types.structure_from_tensor_type_tree(
          lambda t: t, value_type))
      if any(t.shape is None or not t.shape or t.shape[0] is not None
             for t in leaves):
        raise TypeError('stacked weights need values stacked along a leading '
                        f'None dimension, got {value_type}.')
      one_type = stacking.row_type(value_type)
    sum_weight_type = tff.TensorType(np.float32, [g])

    @tff.tensorflow.computation(value_type, weight_type)
    def weighted(value, weight):
      if stacked:
        return (tf.nest.map_structure(
            lambda v: tf.tensordot(weight, v, axes=[[0], [0]]), value),
                tf.reduce_sum(weight, 0),
                tf.reduce_sum(tf.cast(weight > 0, tf.float32), 0))
      return (tf.nest.map_structure(
          lambda v: tf.reshape(weight, [g] + [1] * v.shape.rank) * v[None],
          value), weight, tf.cast(weight > 0, tf.float32))

    @tff.tensorflow.computation(stacking.stacked_type(one_type, g), sum_weight_type)
    def divide(sums, totals):
      safe = tf.where(totals > 0, totals, tf.ones_like(totals))
      return tf.nest.map_structure(
          lambda s: tf.where(
              tf.reshape(totals > 0, [g] + [1] * (s.shape.rank - 1)),
              s / tf.reshape(safe, [g] + [1] * (s.shape.rank - 1)),
              tf.zeros_like(s)), sums)

    @tff.federated_computation
    def init_fn():
      return tff.federated_value((), tff.SERVER)

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS),
                               tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      scaled, summed_weight, counts = tff.federated_map(weighted,
                                                        (value, weight))
      sums = tff.federated_sum(scaled)
      totals = tff.federated_sum(summed_weight)
      means = tff.federated_map(divide, (sums, totals))
      measurements = tff.federated_zip(
          collections.OrderedDict(cluster_weights=totals,
                                  cluster_client_counts=tff.federated_sum(
                                      counts)))
      return tff.templates.MeasuredProcessOutput(state, means, measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)
