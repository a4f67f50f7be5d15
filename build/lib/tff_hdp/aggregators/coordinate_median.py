"""The coordinate-wise median of a round's updates, for an untrusted server.

Each client's update is already private (DP-SGD at its own budget), so any
function of the updates is post-processing: the median costs no privacy and
needs no client weight, and it ignores a minority of very noisy updates in
each coordinate. It is the library's smallest example of a server rule: this
file, one line in `tff_hdp.learning.algorithms` and its test make it
selectable as `--algorithms=median`.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import stacking


def coordinate_median(rows: tf.Tensor) -> tf.Tensor:
  """The median of each column of `rows` (`[n, p]`); the mean of the middle
  two for even n."""
  n = tf.shape(rows)[0]
  ordered = tf.sort(rows, axis=0)
  lower = ordered[(n - 1) // 2]
  upper = ordered[n // 2]
  return (lower + upper) / 2.0


class CoordinateMedianFactory(tff.aggregators.UnweightedAggregationFactory):
  """Aggregates with the coordinate-wise median of the clients' values.

  Stateless; measures nothing. The server sees only the updates, as with
  `RobustHDPFactory`.
  """

  def create(self, value_type: tff.types.TensorType | tff.StructType
             ) -> tff.templates.AggregationProcess:
    """Builds the process for values of `value_type`.

    Args:
      value_type: a tensor or a structure of float tensors.

    Returns:
      A `tff.templates.AggregationProcess` whose result is the median.

    Raises:
      TypeError: `value_type` holds a non-float tensor.
    """
    value_type = tff.types.to_type(value_type)
    if not tff.types.is_structure_of_floats(value_type):
      raise TypeError(f'the median needs float values, got {value_type}.')

    return stacking.stateless_rows_process(
        value_type, lambda rows: (coordinate_median(rows), ()))
