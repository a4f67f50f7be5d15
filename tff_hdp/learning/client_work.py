"""Client work of FedHDP: E local epochs of SGD, weight = privacy-group one-hot.

A client's data is a structure of two sequences, `data` (its batches) and
`group` (a single element: its one-hot privacy-group vector), because a TFF
learning process takes only sequences at CLIENTS. The update is the
pseudo-gradient `theta - theta_local` (TFF's convention; the finalizer applies
it with the server optimizer), and the update weight is the group vector, which
`HeterogeneousDPFactory` turns into per-group sums and counts. A client whose
update is not finite is dropped (weight zero vector) and counted.

The helpers the training tf.functions call that have no Python control flow
on tensors (`local_step`, `drop_if_non_finite`, `train_output`) are marked
`do_not_convert`: autograph would otherwise transpile them and all they call
(TFF's optimizer and nest utilities) on every build of a process, about a
third of a cohort client work's build, for the same graph.
"""

from __future__ import annotations

import collections
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import clipping
from tff_hdp.learning import canaries as canaries_lib

DATA_KEY = 'data'
GROUP_KEY = 'group'


def client_data_type(model_input_spec, num_groups: int,
                     canaries: bool = False) -> tff.Type:
  """TFF type of one client's input: its batches and its group vector (and,
  in a run with canaries, its canary row: `canaries.NOT_A_CANARY` or >= 0)."""
  parts = [
      (DATA_KEY, tff.SequenceType(tff.types.tensorflow_to_type(
          model_input_spec))),
      (GROUP_KEY, tff.SequenceType(tff.TensorType(np.float32,
                                                  [num_groups]))),
  ]
  if canaries:
    parts.append((canaries_lib.CANARY_KEY,
                  tff.SequenceType(tff.TensorType(np.int32))))
  return tff.types.to_type(collections.OrderedDict(parts))


def make_client_data(dataset: tf.data.Dataset, group_one_hot: np.ndarray,
                     canary_row: int | None = None) -> collections.OrderedDict:
  """Packs a client's batched dataset and its group into the client input
  (with `canary_row`, for a process built with canaries)."""
  data = collections.OrderedDict([
      (DATA_KEY, dataset),
      (GROUP_KEY, tf.data.Dataset.from_tensors(
          np.asarray(group_one_hot, np.float32))),
  ])
  if canary_row is not None:
    data[canaries_lib.CANARY_KEY] = tf.data.Dataset.from_tensors(
        np.int32(canary_row))
  return data


@tf.autograph.experimental.do_not_convert
def drop_if_non_finite(update, one_hot):
  """A non-finite update becomes zeros with a zero weight (the client is
  dropped); also returns whether it was finite, for the count."""
  finite = clipping.all_finite(update)
  return (clipping.zero_unless(finite, update),
          clipping.zero_unless(finite, one_hot), finite)


@tf.autograph.experimental.do_not_convert
def local_step(model, optimizer, opt_state, batch):
  """One optimizer step of `model` on `batch` (its metrics updated too);
  returns the new optimizer state and the batch's example count."""
  trainable = tf.nest.flatten(model.trainable_variables)
  with tf.GradientTape() as tape:
    output = model.forward_pass(batch, training=True)
  grads = tape.gradient(output.loss, trainable)
  opt_state, updated = optimizer.next(opt_state, tuple(trainable),
                                      tuple(grads))
  for v, u in zip(trainable, updated):
    v.assign(u)
  return opt_state, tf.cast(output.num_examples, tf.int64)


def _build_local_training(model_fn, epochs: int, num_groups: int,
                          directions: canaries_lib.CanaryDirections | None):
  """The tf.function that trains one client and returns its result (a
  canary's: its direction, `canaries.replace_if_canary`)."""
  model = model_fn()

  @tf.function
  def train(optimizer, optimizer_hparams, initial_weights, client_data):
    data, group = client_data[DATA_KEY], client_data[GROUP_KEY]
    weights = tff.learning.models.ModelWeights.from_model(model)
    tf.nest.map_structure(lambda v, t: v.assign(t), weights, initial_weights)
    trainable_specs = tuple(
        tf.TensorSpec(v.shape, v.dtype)
        for v in tf.nest.flatten(weights.trainable))
    opt_state = optimizer.set_hparams(
        optimizer.initialize(trainable_specs), optimizer_hparams)

    def step(state, batch):
      num_examples, opt_state = state
      opt_state, batch_examples = local_step(model, optimizer, opt_state,
                                             batch)
      return num_examples + batch_examples, opt_state

    num_examples, _ = data.repeat(epochs).reduce(
        (tf.constant(0, tf.int64), opt_state), step)
    one_hot = group.reduce(tf.zeros([num_groups], tf.float32),
                           lambda acc, g: acc + g)
    update = tf.nest.map_structure(tf.subtract, initial_weights.trainable,
                                   weights.trainable)
    if directions is not None:
      row = client_data[canaries_lib.CANARY_KEY].reduce(
          tf.constant(canaries_lib.NOT_A_CANARY), lambda _, r: r)
      update = tf.nest.pack_sequence_as(update, canaries_lib.replace_if_canary(
          directions, row, tf.nest.flatten(update)))
    update, weight, finite = drop_if_non_finite(update, one_hot)
    non_finite = 1 - tf.cast(finite, tf.int32)
    if non_finite > 0:
      model.reset_metrics()
    return train_output(model, update, weight, num_examples, non_finite)

  return train


@tf.autograph.experimental.do_not_convert
def train_output(model, update, weight, num_examples, num_non_finite):
  """What a train function of `build_client_work_process` returns."""
  return (tff.learning.templates.ClientResult(update=update,
                                              update_weight=weight),
          model.report_local_unfinalized_metrics(),
          collections.OrderedDict(num_examples=num_examples,
                                  num_non_finite_updates=num_non_finite))


def build_client_work_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_optimizer: tff.learning.optimizers.Optimizer,
    data_type_fn: Callable[[object], tff.Type],
    build_train: Callable[[], Callable]
) -> tff.learning.templates.ClientWorkProcess:
  """The `ClientWorkProcess` around a local-training tf.function.

  Shared by the per-client and the cohort client work
  (`tff_hdp.learning.cohort`): `data_type_fn(model.input_spec)` is a TFF
  client's input type, and `build_train()` returns `train(optimizer, hparams,
  initial_weights, client_data) -> (ClientResult, unfinalized metrics,
  counts)` with counts `num_examples` and `num_non_finite_updates`; the server
  state is the client optimizer's hyperparameters.

  Args:
    model_fn: builds the TFF model; called here once for its weights' type,
      input spec and metric finalizers.
    client_optimizer: the clients' local optimizer.
    data_type_fn: maps the model's input spec to a TFF client's input type.
    build_train: builds the local-training tf.function described above.

  Returns:
    A `tff.learning.templates.ClientWorkProcess` whose state is the client
    optimizer's hyperparameters and whose measurements are the aggregated
    `train` metrics and the summed `num_examples` and
    `num_non_finite_updates`.
  """
  with tf.Graph().as_default():
    model = model_fn()
    metrics_aggregation_fn = tff.learning.metrics.sum_then_finalize(
        model.metric_finalizers())
  weights_type = tff.learning.models.weights_type_from_model(model)
  data_type = data_type_fn(model.input_spec)
  initial_hparams = client_optimizer.get_hparams(
      client_optimizer.initialize(tf.TensorSpec([], tf.float32)))

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(initial_hparams, tff.SERVER)

  hparams_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(hparams_type)
  def get_hparams_fn(state):
    return state

  @tff.tensorflow.computation(hparams_type, hparams_type)
  def set_hparams_fn(state, hparams):
    del state
    return hparams

  @tff.tensorflow.computation(hparams_type, weights_type, data_type)
  def client_update(hparams, initial_weights, client_data):
    return build_train()(client_optimizer, hparams, initial_weights,
                         client_data)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(weights_type, tff.CLIENTS),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, client_data):
    hparams_at_clients = tff.federated_broadcast(state)
    result, model_outputs, counts = tff.federated_map(
        client_update, (hparams_at_clients, weights, client_data))
    measurements = tff.federated_zip(
        collections.OrderedDict(
            train=metrics_aggregation_fn(model_outputs),
            **{k: tff.federated_sum(v) for k, v in
               [('num_examples', counts.num_examples),
                ('num_non_finite_updates', counts.num_non_finite_updates)]}))
    return tff.templates.MeasuredProcessOutput(state, result, measurements)

  return tff.learning.templates.ClientWorkProcess(
      init_fn, next_fn, get_hparams_fn=get_hparams_fn,
      set_hparams_fn=set_hparams_fn)


def build_group_client_work(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_optimizer: tff.learning.optimizers.Optimizer,
    num_groups: int,
    epochs: int = 1,
    directions: canaries_lib.CanaryDirections | None = None
) -> tff.learning.templates.ClientWorkProcess:
  """`ClientWorkProcess` of E local epochs whose weight is the group vector.

  Args:
    model_fn: builds the TFF model.
    client_optimizer: the clients' local optimizer.
    num_groups: l, the length of the one-hot privacy-group vector.
    epochs: E, local epochs per round.
    directions: canaries' directions; their clients' data then carries a
      canary row, and a canary sends its direction as its update.

  Returns:
    The `tff.learning.templates.ClientWorkProcess` of
    `build_client_work_process` for per-client data (`client_data_type`).

  Raises:
    ValueError: if `epochs` is less than 1.
  """
  if epochs < 1:
    raise ValueError(f'local epochs must be >= 1, got {epochs}.')
  return build_client_work_process(
      model_fn, client_optimizer,
      lambda spec: client_data_type(spec, num_groups, directions is not None),
      lambda: _build_local_training(model_fn, epochs, num_groups, directions))
