"""PFA: the private clients' mean, projected onto the public clients' subspace.

Liu et al. (VLDB 2021), as PDP-FL's Algorithm 1 writes it. Clients with an
epsilon of at least `public_epsilon` are "public"; the top-k eigenvectors
`V_k` of their updates' second-moment matrix span a subspace, the private
clients' epsilon-weighted mean is replaced by `V_k V_k^T` of itself, and the
two group means are combined with WeiAvg weights (each group's share of the
total epsilon). The client weight is its epsilon, which this baseline (unlike
Robust-HDP) reveals to the server. With no public or no private client in a
round there is nothing to project and the result is plain WeiAvg.
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import stacking


def pfa_combine(rows: tf.Tensor, epsilons: tf.Tensor, public_epsilon: float,
                rank: int):
  """PFA's aggregate of `rows` ([n, p]) and the public / private counts."""
  public = epsilons >= public_epsilon
  num_public = tf.reduce_sum(tf.cast(public, tf.int32))
  num_private = tf.shape(rows)[0] - num_public
  shares = epsilons / tf.reduce_sum(epsilons)
  weighted = rows * shares[:, None]
  public_part = tf.reduce_sum(tf.boolean_mask(weighted, public), 0)
  private_part = tf.reduce_sum(tf.boolean_mask(weighted, ~public), 0)

  def project():
    # Right singular vectors of the public rows are the eigenvectors of their
    # second-moment matrix, in decreasing order.
    _, _, v = tf.linalg.svd(tf.boolean_mask(rows, public))
    v_k = v[:, :rank]
    return tf.linalg.matvec(v_k, tf.linalg.matvec(v_k, private_part,
                                                  transpose_a=True))

  projected = tf.cond(
      tf.logical_and(num_public > 0, num_private > 0), project,
      lambda: private_part)
  return public_part + projected, num_public, num_private


class PFAFactory(tff.aggregators.WeightedAggregationFactory):
  """Projected federated averaging; the weight of a client is its epsilon.

  Args:
    public_epsilon: clients with epsilon >= this are public.
    projection_rank: k, the number of public eigenvectors kept (at most the
      number of public clients in the round).
  """

  def __init__(self, public_epsilon: float, projection_rank: int = 1):
    if not public_epsilon > 0:
      raise ValueError(f'public epsilon must be > 0, got {public_epsilon}.')
    if projection_rank < 1:
      raise ValueError(
          f'projection rank must be >= 1, got {projection_rank}.')
    self._public_epsilon = float(public_epsilon)
    self._rank = int(projection_rank)

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    value_type = tff.types.to_type(value_type)
    weight_type = tff.types.to_type(weight_type)
    if not weight_type.is_equivalent_to(tff.TensorType(np.float32)):
      raise TypeError(
          f'the weight must be a float32 epsilon, got {weight_type}.')

    @tff.tensorflow.computation(value_type, weight_type)
    def to_row(value, epsilon):
      return collections.OrderedDict(row=stacking.flatten(value),
                                     epsilon=epsilon)

    stacked_type = tff.types.to_type(
        collections.OrderedDict(
            row=tff.TensorType(np.float32,
                               [None, stacking.num_params(value_type)]),
            epsilon=tff.TensorType(np.float32, [None])))

    @tff.tensorflow.computation(stacked_type)
    def server_update(stacked):
      combined, num_public, num_private = pfa_combine(
          stacked['row'], stacked['epsilon'], self._public_epsilon, self._rank)
      return (stacking.unflatten(combined, value_type),
              collections.OrderedDict(num_public=num_public,
                                      num_private=num_private))

    @tff.federated_computation()
    def init_fn():
      return tff.federated_value((), tff.SERVER)

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS),
                               tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      stacked = stacking.stack_at_server(
          tff.federated_map(to_row, (value, weight)))
      result, measurements = tff.federated_map(server_update, stacked)
      return tff.templates.MeasuredProcessOutput(state, result, measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)
