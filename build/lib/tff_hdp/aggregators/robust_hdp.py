"""Robust-HDP: inverse-noise-variance weights estimated by Robust PCA.

SPEC.md §3 and Robust-HDP Algorithm 1. The server stacks the round's updates
as the columns of `M (p x n)`, splits `M = L + S` by principal component
pursuit and estimates client i's noise variance as `||S[:, i]||^2 / p`; the
update is `sum_i w_i Delta_i` with `w_i ∝ 1 / sigma_hat_i^2`. It is an
unweighted factory on purpose: its only input is the updates, so the server
never receives a client's epsilon or batch size.

The paper recomputes the weights every round; its authors' code computes them
once and reuses them. Both are here (`freeze_after_round`), and the
measurements say every round which one ran and whether RPCA converged.
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import rpca
from tff_hdp.aggregators import stacking


def inverse_variance_weights(variances: tf.Tensor) -> tf.Tensor:
  """`w_i ∝ 1 / v_i`, normalized; zero variances take the limit (all weight)."""
  tiny = np.finfo(np.float64).tiny
  inverse = 1.0 / tf.maximum(tf.cast(variances, tf.float64), tiny)
  return tf.cast(inverse / tf.reduce_sum(inverse), tf.float32)


class RobustHDPFactory(tff.aggregators.UnweightedAggregationFactory):
  """Weights each update by the inverse of its RPCA-estimated noise variance.

  Measurements per round: `weights`, `noise_variance_estimates` (NaN in a
  round that reused frozen weights), `weights_frozen`, `rpca_converged` (every
  block) and `rpca_iterations` (the most any block used). Weights from an
  RPCA that hit its iteration cap are still used, and reported as such.
  """

  def __init__(self,
               block_rows: int = 200_000,
               tolerance: float = 1e-7,
               max_iterations: int = 1000,
               freeze_after_round: int | None = None) -> None:
    """Initializes `RobustHDPFactory`.

    Args:
      block_rows: rows p' per RPCA block (the paper uses 200,000 for
        CIFAR-10); the estimates of the blocks are averaged.
      tolerance: RPCA stops when `||M - L - S||_F <= tolerance ||M||_F`.
      max_iterations: RPCA iteration cap per block.
      freeze_after_round: None recomputes every round (Algorithm 1); k >= 1
        computes the weights in rounds 1..k and reuses round k's weights
        after (the authors' code is k = 1). Reuse assumes the same clients in
        the same order every round (full participation); a round with a
        different number of clients recomputes.

    Raises:
      ValueError: if `block_rows` or `max_iterations` is less than 1,
        `tolerance` is not > 0, or `freeze_after_round` is neither None nor
        >= 1.
    """
    if block_rows < 1:
      raise ValueError(f'block rows must be >= 1, got {block_rows}.')
    if not tolerance > 0 or max_iterations < 1:
      raise ValueError('RPCA needs tolerance > 0 and max_iterations >= 1, got '
                       f'{tolerance} and {max_iterations}.')
    if freeze_after_round is not None and freeze_after_round < 1:
      raise ValueError(
          f'freeze_after_round must be >= 1 or None, got {freeze_after_round}.')
    self._block_rows = int(block_rows)
    self._tolerance = float(tolerance)
    self._max_iterations = int(max_iterations)
    self._freeze_after = freeze_after_round

  def create(self, value_type: tff.types.TensorType | tff.StructType
             ) -> tff.templates.AggregationProcess:
    """Builds the process for values of `value_type`.

    Args:
      value_type: a client's update, a tensor or a structure of tensors.

    Returns:
      A `tff.templates.AggregationProcess` whose state holds the round number
      and the frozen weights, whose result is `sum_i w_i Delta_i` in
      `value_type`'s structure, and whose measurements are those the class
      docstring lists.
    """
    value_type = tff.types.to_type(value_type)
    freeze_after = self._freeze_after

    @tff.tensorflow.computation
    def initial_state():
      return collections.OrderedDict(
          round_num=tf.constant(0, tf.int64),
          # Shape [None]: the weights frozen later have one per client.
          frozen_weights=tf.compat.v1.placeholder_with_default(
              np.zeros([0], np.float32), [None]))

    state_type = initial_state.type_signature.result

    @tff.tensorflow.computation(value_type)
    def to_row(value):
      return stacking.flatten(value)

    rows_type = tff.TensorType(np.float32,
                               [None, stacking.num_params(value_type)])

    @tff.tensorflow.computation(state_type, rows_type)
    def server_update(state, rows):
      round_num = state['round_num'] + 1
      num_clients = tf.shape(rows)[0]
      frozen = state['frozen_weights']
      if freeze_after is None:
        use_frozen = tf.constant(False)
      else:
        use_frozen = tf.logical_and(round_num > freeze_after,
                                    tf.equal(tf.shape(frozen)[0], num_clients))

      def estimate():
        variances, converged, iterations = rpca.blocked_noise_variances(
            tf.transpose(rows), self._block_rows, self._tolerance,
            self._max_iterations)
        return (inverse_variance_weights(variances),
                tf.cast(variances, tf.float32), converged, iterations)

      def reuse():
        return (frozen, tf.fill([num_clients], np.float32(np.nan)),
                tf.constant(True), tf.constant(0))

      weights, variances, converged, iterations = tf.cond(
          use_frozen, reuse, estimate)
      if freeze_after is None:
        new_frozen = frozen
      else:
        new_frozen = tf.cond(round_num <= freeze_after, lambda: weights,
                             lambda: frozen)
      result = stacking.unflatten(
          tf.linalg.matvec(rows, weights, transpose_a=True), value_type)
      new_state = collections.OrderedDict(
          round_num=round_num, frozen_weights=new_frozen)
      measurements = collections.OrderedDict(
          weights=weights,
          noise_variance_estimates=variances,
          weights_frozen=use_frozen,
          rpca_converged=converged,
          rpca_iterations=iterations)
      return new_state, result, measurements

    @tff.federated_computation()
    def init_fn():
      return tff.federated_eval(initial_state, tff.SERVER)

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      rows = stacking.stack_at_server(tff.federated_map(to_row, value))
      new_state, result, measurements = tff.federated_map(
          server_update, (state, rows))
      return tff.templates.MeasuredProcessOutput(new_state, result,
                                                 measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)
