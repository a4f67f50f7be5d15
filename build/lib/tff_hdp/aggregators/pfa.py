"""PFA with hidden budgets: partition by update norms, then project (PDP-FL).

Liu et al.'s projected federated averaging as PDP-FL's Algorithm 1 runs it
when clients do not reveal their epsilons: the server splits the round's
clients into public and private by a two-component Gaussian mixture on the
norms of their noisy updates (`norm_partition`), takes the top-k eigenvectors
`V_k` of the public updates' second-moment matrix, and replaces the private
clients' sum by `V_k V_k^T` of itself. Without epsilons there are no WeiAvg
shares, so every client counts once: the result is
`(sum_public Delta_i + V_k V_k^T sum_private Delta_i) / n`. With no public or
no private client in a round there is nothing to project and the result is
the plain mean. The factory is unweighted: the server receives the updates
and nothing else.
"""

from __future__ import annotations

import collections

import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import norm_partition
from tff_hdp.aggregators import stacking


def pfa_combine(rows: tf.Tensor, public: tf.Tensor, rank: int) -> tf.Tensor:
  """PFA's aggregate of `rows` ([n, p]) given the public ones (mask [n])."""
  num_public = tf.reduce_sum(tf.cast(public, tf.int32))
  num_private = tf.shape(rows)[0] - num_public
  public_sum = tf.reduce_sum(tf.boolean_mask(rows, public), 0)
  private_sum = tf.reduce_sum(tf.boolean_mask(rows, ~public), 0)

  def project():
    # Right singular vectors of the public rows are the eigenvectors of their
    # second-moment matrix, in decreasing order.
    _, _, v = tf.linalg.svd(tf.boolean_mask(rows, public))
    v_k = v[:, :rank]
    return tf.linalg.matvec(v_k, tf.linalg.matvec(v_k, private_sum,
                                                  transpose_a=True))

  projected = tf.cond(
      tf.logical_and(num_public > 0, num_private > 0), project,
      lambda: private_sum)
  return (public_sum + projected) / tf.cast(tf.shape(rows)[0], rows.dtype)


class PFAFactory(tff.aggregators.UnweightedAggregationFactory):
  """Projected federated averaging on a partition the server infers.

  Measurements per round: `public` (per client, in the order the updates were
  stacked), `num_public`, `num_private`, `update_norms`, `mixture_means`
  (of the log norms, public first), `mixture_converged` and
  `mixture_iterations`. A partition from an EM that hit its cap is still
  used, and reported as such.
  """

  def __init__(self, projection_rank: int = 1, max_iterations: int = 200,
               tolerance: float = 1e-6) -> None:
    """Initializes `PFAFactory`.

    Args:
      projection_rank: k, the number of public eigenvectors kept (at most the
        number of public clients in the round).
      max_iterations: EM iteration cap of the norm mixture.
      tolerance: EM stops when the mean log-likelihood changes by less.

    Raises:
      ValueError: if `projection_rank` or `max_iterations` is less than 1, or
        `tolerance` is not > 0.
    """
    if projection_rank < 1:
      raise ValueError(
          f'projection rank must be >= 1, got {projection_rank}.')
    if max_iterations < 1 or not tolerance > 0:
      raise ValueError('EM needs max_iterations >= 1 and tolerance > 0, got '
                       f'{max_iterations} and {tolerance}.')
    self._rank = int(projection_rank)
    self._max_iterations = int(max_iterations)
    self._tolerance = float(tolerance)

  def create(self, value_type: tff.types.TensorType | tff.StructType
             ) -> tff.templates.AggregationProcess:
    """Builds the process for values of `value_type`.

    Args:
      value_type: a client's update, a tensor or a structure of tensors.

    Returns:
      A stateless `tff.templates.AggregationProcess` whose result is PFA's
      aggregate `(sum_public Delta_i + V_k V_k^T sum_private Delta_i) / n` in
      `value_type`'s structure, with the measurements the class docstring
      lists.
    """

    def server_update(rows):
      public, fit = norm_partition.public_by_update_norm(
          rows, self._max_iterations, self._tolerance)
      num_public = tf.reduce_sum(tf.cast(public, tf.int32))
      measurements = collections.OrderedDict(
          public=public,
          num_public=num_public,
          num_private=tf.shape(rows)[0] - num_public,
          update_norms=tf.norm(rows, axis=1),
          mixture_means=fit.means,
          mixture_converged=fit.converged,
          mixture_iterations=fit.iterations)
      return pfa_combine(rows, public, self._rank), measurements

    return stacking.stateless_rows_process(value_type, server_update)
