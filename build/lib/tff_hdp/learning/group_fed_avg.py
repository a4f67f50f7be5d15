"""FedHDP's per-group DP aggregation inside TFF's own learning process.

For a TFF user with their own Keras model (`tff.learning.models.
from_keras_model`) and `ClientData`: TFF 0.87's stock builders cannot carry
a client's privacy group to the server rule (every builder creates its
aggregator with a float32 scalar weight, `client_weighting` takes only
NUM_EXAMPLES or UNIFORM, and a learning process's only per-client input is
the client's data). So the group travels in the data, as the second part of
each element, `(batch, int32 group)` (`attach_group`), and
`build_group_client_work` wraps TFF's own client work: it trains on the
batches and sends the one-hot group as the update's weight, built here with
`tf.one_hot` (an index out of range, which `attach_group` refuses, or a
client TFF's work excluded for a non-finite update, weighs zero), never
taken from the data as a vector. `build_group_weighted_fed_avg` composes
it with TFF's own distributor, finalizer and optimizers around any
`model_aggregator` weighted by the float32[l] group vector,
`HeterogeneousDPFactory` first; it reads like `tff.learning.algorithms.
build_weighted_fed_avg`, which cannot take such a factory (it raises a
TypeError on the scalar weight it passes). The process's client data stay
one dataset per client, so TFF's tooling (`tff.simulation.
compose_dataset_computation_with_learning_process`, `tff.program`) applies.

What a user must keep (README, "The library"): the groups are public and
fixed per client (from the clients' declared choices, never from data);
client weighting is UNIFORM (a data-dependent weight breaks a client's
sensitivity); the DP noise's seed stays secret; and TFF's client work
releases its training metrics (loss, `num_examples`) without noise: pass a
`metrics_aggregator` that releases nothing in a private run.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


def attach_group(dataset: tf.data.Dataset, group: int,
                 num_groups: int) -> tf.data.Dataset:
  """A client's (batched) dataset with its privacy group index beside each
  batch: the client data `build_group_weighted_fed_avg` trains on.

  Args:
    dataset: the client's batches.
    group: its privacy group, in 0..num_groups-1.
    num_groups: l, as given to `build_group_weighted_fed_avg`.

  Raises:
    ValueError: `group` is not a group index below `num_groups`; inside the
      process such a client would weigh zero, its update silently lost.
  """
  if isinstance(num_groups, bool) or not isinstance(
      num_groups, (int, np.integer)) or num_groups < 1:
    raise ValueError(f'num_groups must be an int >= 1, got {num_groups!r}.')
  if isinstance(group, bool) or not isinstance(
      group, (int, np.integer)) or not 0 <= group < num_groups:
    raise ValueError(f'group must be an int in 0..{num_groups - 1} (one of '
                     f'the {num_groups} privacy groups), got {group!r}.')
  return dataset.map(lambda *batch: (batch[0] if len(batch) == 1 else batch,
                                     tf.constant(group, tf.int32)))


def build_group_client_work(
    client_work: tff.learning.templates.ClientWorkProcess, num_groups: int
) -> tff.learning.templates.ClientWorkProcess:
  """`client_work` on datasets of `(batch, int32 group)` elements, whose
  update weight is the client's one-hot group vector (float32[num_groups]).

  Args:
    client_work: TFF's client work with UNIFORM client weighting (e.g.
      `tff.learning.templates.build_model_delta_client_work`); a weight of
      0 from it (a non-finite update, which it zeroes) excludes the client.
    num_groups: l, the number of privacy groups.

  Returns:
    The wrapped client work.

  Raises:
    ValueError: `num_groups` is below 1.
  """
  if num_groups < 1:
    raise ValueError(f'num_groups must be >= 1, got {num_groups}.')
  state_type, weights_type, data_type = (
      client_work.next.type_signature.parameter)
  element_type = tff.StructWithPythonType(
      [data_type.member.element, tff.TensorType(np.int32)], tuple)
  grouped_type = tff.SequenceType(element_type)
  inner_weight_type = (
      client_work.next.type_signature.result.result.member.update_weight)

  @tff.tensorflow.computation(grouped_type)
  def batches(dataset):
    return dataset.map(lambda batch, group: batch)

  @tff.tensorflow.computation(grouped_type, inner_weight_type)
  def group_weight(dataset, inner_weight):
    index = dataset.take(1).reduce(tf.constant(-1, tf.int32),
                                   lambda _, element: element[1])
    return tf.one_hot(index, num_groups) * tf.cast(inner_weight > 0,
                                                   tf.float32)

  @tff.federated_computation(state_type, weights_type,
                             tff.FederatedType(grouped_type, tff.CLIENTS))
  def next_fn(state, weights, client_data):
    output = client_work.next(state, weights,
                              tff.federated_map(batches, client_data))
    weight = tff.federated_map(group_weight,
                               (client_data, output.result.update_weight))
    result = tff.federated_zip(tff.learning.templates.ClientResult(
        update=output.result.update, update_weight=weight))
    return tff.templates.MeasuredProcessOutput(output.state, result,
                                               output.measurements)

  return tff.learning.templates.ClientWorkProcess(
      client_work.initialize, next_fn,
      get_hparams_fn=client_work.get_hparams,
      set_hparams_fn=client_work.set_hparams)


def build_group_weighted_fed_avg(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer | None = None,
    *,
    num_groups: int,
    model_aggregator: tff.aggregators.WeightedAggregationFactory,
    model_distributor: tff.learning.templates.DistributionProcess | None = None,
    metrics_aggregator=None,
) -> tff.learning.templates.LearningProcess:
  """FedAvg whose server rule sees each client's privacy group.

  Use it, not TFF's `build_weighted_fed_avg`, for a group-weighted factory:
  TFF's builder creates the aggregator with a float32 scalar weight, which
  such a factory refuses with a TypeError.

  TFF's own pieces (`build_broadcast_process`, `build_model_delta_client_work`
  with UNIFORM weighting, `build_apply_optimizer_finalizer`) composed by
  `compose_learning_process`, with the client work wrapped by
  `build_group_client_work`. Client data: one dataset per client whose
  elements are `(batch, group)` (`attach_group`).

  Args:
    model_fn: builds the user's TFF model.
    client_optimizer_fn: the clients' optimizer.
    server_optimizer_fn: applies the aggregate (default: SGD at rate 1,
      theta <- theta + Delta).
    num_groups: l, the number of privacy groups.
    model_aggregator: weighted by float32[num_groups] (e.g.
      `HeterogeneousDPFactory.gaussian_adaptive(...)`).
    model_distributor: default: TFF's broadcast.
    metrics_aggregator: TFF's training-metrics aggregator (default TFF's
      `sum_then_finalize`, which releases the clients' metrics as they are).

  Returns:
    The `tff.learning.templates.LearningProcess`.

  Raises:
    TypeError: `model_aggregator` refuses float32[num_groups] weights.
  """
  if server_optimizer_fn is None:
    server_optimizer_fn = tff.learning.optimizers.build_sgdm(1.0)

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  weights_type = initial_model_weights_fn.type_signature.result
  if model_distributor is None:
    model_distributor = tff.learning.templates.build_broadcast_process(
        weights_type)
  client_work = build_group_client_work(
      tff.learning.templates.build_model_delta_client_work(
          model_fn, client_optimizer_fn, tff.learning.ClientWeighting.UNIFORM,
          metrics_aggregator), num_groups)
  aggregator = model_aggregator.create(
      weights_type.trainable, tff.TensorType(np.float32, [num_groups]))
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      server_optimizer_fn, weights_type)
  return tff.learning.templates.compose_learning_process(
      initial_model_weights_fn, model_distributor, client_work, aggregator,
      finalizer)
