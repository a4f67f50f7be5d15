"""A round's client values as the rows of one tensor at the server.

Robust-HDP and PFA look at all of a round's updates jointly (a matrix
decomposition, a subspace), which no sum can express. `tff.federated_aggregate`
with an accumulator whose leading dimension is `None` collects them, the way
TFF's own reservoir sampler does; `flatten` / `unflatten` turn a model update
into one vector and back.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


def _leaf_types(value_type: tff.Type) -> list[tff.TensorType]:
  return tf.nest.flatten(
      tff.types.structure_from_tensor_type_tree(lambda t: t, value_type))


def _map_leaf_types(fn, value_type) -> tff.Type:
  return tff.types.to_type(tf.nest.map_structure(
      fn, tff.types.structure_from_tensor_type_tree(
          lambda t: t, tff.types.tensorflow_to_type(value_type))))


def stacked_type(value_type, rows: int | None = None) -> tff.Type:
  """`value_type` (a TFF type or a structure of `tf.TensorSpec`s) with a
  leading dimension of `rows` (None: any number) on every leaf: the type of
  several clients' values, one per row."""
  return _map_leaf_types(
      lambda t: tff.TensorType(t.dtype, [rows] + list(t.shape)), value_type)


def row_type(value_type) -> tff.Type:
  """One row of a `stacked_type`: every leaf without its leading dimension."""
  return _map_leaf_types(lambda t: tff.TensorType(t.dtype, t.shape[1:]),
                         value_type)


def num_params(value_type: tff.Type) -> int:
  """Number of scalars in a structure of tensors."""
  return sum(int(np.prod(t.shape)) for t in _leaf_types(value_type))


def flatten(structure) -> tf.Tensor:
  """All leaves of `structure`, as one float32 vector."""
  return tf.concat([
      tf.reshape(tf.cast(x, tf.float32), [-1])
      for x in tf.nest.flatten(structure)
  ], 0)


def unflatten(vector: tf.Tensor, value_type: tff.Type):
  """Inverse of `flatten` for a structure of type `value_type`."""
  template = tff.types.structure_from_tensor_type_tree(lambda t: t,
                                                       value_type)
  leaves = _leaf_types(value_type)
  sizes = [int(np.prod(t.shape)) for t in leaves]
  parts = tf.split(vector, sizes)
  return tf.nest.pack_sequence_as(template, [
      tf.cast(tf.reshape(part, t.shape), t.dtype)
      for part, t in zip(parts, leaves)
  ])


def stack_at_server(values):
  """`values` (a structure of tensors at CLIENTS) stacked along a new axis 0.

  Row i of every leaf comes from the same client; the order is the one the
  runtime accumulates in and means nothing beyond that.
  """
  member = values.type_signature.member
  rows_type = stacked_type(member)

  @tff.tensorflow.computation
  def zero():
    return tf.nest.map_structure(
        lambda t: tf.zeros([0] + list(t.shape), t.dtype),
        tff.types.structure_from_tensor_type_tree(lambda t: t, member))

  @tff.tensorflow.computation(rows_type, member)
  def accumulate(rows, value):
    return tf.nest.map_structure(lambda r, v: tf.concat([r, v[None]], 0),
                                 rows, value)

  @tff.tensorflow.computation(rows_type, rows_type)
  def merge(a, b):
    return tf.nest.map_structure(lambda x, y: tf.concat([x, y], 0), a, b)

  @tff.tensorflow.computation(rows_type)
  def report(rows):
    return rows

  return tff.federated_aggregate(values, zero(), accumulate, merge, report)


def stateless_rows_process(value_type: tff.Type, server_fn
                           ) -> tff.templates.AggregationProcess:
  """A stateless aggregation whose server sees the round's values as rows.

  `server_fn(rows)` maps the `[n, p]` float32 rows (one client's flattened
  value each) to `(vector, measurements)`: the aggregate as a `[p]` vector,
  returned in `value_type`'s structure, and a structure of tensors (or `()`).
  """
  value_type = tff.types.to_type(value_type)

  @tff.tensorflow.computation(value_type)
  def to_row(value):
    return flatten(value)

  rows_type = tff.TensorType(np.float32, [None, num_params(value_type)])

  @tff.tensorflow.computation(rows_type)
  def server_update(rows):
    vector, measurements = server_fn(rows)
    return unflatten(vector, value_type), measurements

  @tff.federated_computation()
  def init_fn():
    return tff.federated_value((), tff.SERVER)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(value_type, tff.CLIENTS))
  def next_fn(state, value):
    rows = stack_at_server(tff.federated_map(to_row, value))
    result, measurements = tff.federated_map(server_update, rows)
    return tff.templates.MeasuredProcessOutput(state, result, measurements)

  return tff.templates.AggregationProcess(init_fn, next_fn)
