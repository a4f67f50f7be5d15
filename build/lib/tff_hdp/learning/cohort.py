"""Cohort simulation: many sampled clients inside one TFF client computation.

TFF 0.87 spends 10-20 ms orchestrating each TFF client, ten times the local
training of a small model (SPEC.md §4). A cohort packs K sampled clients'
(already shuffled) examples into padded tensors that one TFF client receives;
its client work trains each simulated client in turn, from the global model,
on its own examples only, in one in-graph loop, and returns the K updates
stacked. `CohortHeterogeneousDPFactory` then clips every simulated client's
row to S on its own, so per-client semantics (batches, local epochs, clipping,
clip bits, dropped non-finite updates) and the DP mechanism are exactly those
of the per-client process; only the order of floating-point sums differs.

A cohort's input is a one-element sequence (TFF learning processes take
sequences at CLIENTS) of an `OrderedDict`:
  * `data`: the model's input structure, each leaf [K, n_max] + example shape;
  * `num_examples`: int32 [K], the real examples of each slot;
  * `group`: float32 [K, l], one-hot privacy-group rows, all zero for padding;
  * `canary` (only in runs with canaries): int32 [K], each slot's canary row
    or `canaries.NOT_A_CANARY`.
K and n_max are unknown dimensions of the TFF type, so every cohort size runs
the one traced computation: nothing retraces between rounds.
"""

from __future__ import annotations

import collections
import math
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp import federated_task
from tff_hdp.learning import canaries as canaries_lib
from tff_hdp.learning import client_work as client_work_lib
from tff_hdp.learning import learning_process
from tff_hdp.aggregators import heterogeneous_dp
from tff_hdp.aggregators import stacking

DATA_KEY = 'data'
COUNT_KEY = 'num_examples'
GROUP_KEY = 'group'


def cohort_data_type(model_input_spec, num_groups: int,
                     canaries: bool = False) -> tff.Type:
  """TFF type of one cohort: padded examples, counts and group rows (and
  canary rows)."""
  parts = [
      (DATA_KEY, stacking.stacked_type(model_input_spec)),
      (COUNT_KEY, tff.TensorType(np.int32, [None])),
      (GROUP_KEY, tff.TensorType(np.float32, [None, num_groups])),
  ]
  if canaries:
    parts.append((canaries_lib.CANARY_KEY, tff.TensorType(np.int32, [None])))
  return tff.SequenceType(tff.types.to_type(collections.OrderedDict(parts)))


def split_sizes(num_clients: int, cohort_size: int) -> list[int]:
  """Sizes of the fewest cohorts of at most `cohort_size`, as equal as can be
  (so both of two cohorts do half the work)."""
  if cohort_size < 1:
    raise ValueError(f'cohort size must be >= 1, got {cohort_size}.')
  num_cohorts = math.ceil(num_clients / cohort_size)
  if not num_cohorts:
    return []
  base, extra = divmod(num_clients, num_cohorts)
  return [base + (i < extra) for i in range(num_cohorts)]


def pad_examples(client_data: Sequence, slots: int | None = None):
  """Clients' example structures (e.g. `(x, y)`, in training order) as one
  structure of `[slots, n_max, ...]` arrays and the int32 `[slots]` counts of
  real examples; `slots` > len pads with empty clients."""
  k = len(client_data)
  slots = k if slots is None else slots
  if not 0 < k <= slots:
    raise ValueError(f'{k} clients do not fit in {slots} cohort slots.')
  counts = np.zeros(slots, np.int32)
  counts[:k] = [len(tf.nest.flatten(d)[0]) for d in client_data]
  n_max = int(counts.max())

  def pad(*leaves):
    out = np.zeros((slots, n_max) + leaves[0].shape[1:], leaves[0].dtype)
    for i, leaf in enumerate(leaves):
      out[i, :len(leaf)] = leaf
    return out

  return tf.nest.map_structure(pad, *client_data), counts


def pack_cohort(client_data: Sequence, one_hots: Sequence[np.ndarray],
                num_groups: int, slots: int | None = None,
                canary_rows: Sequence[int] | None = None) -> tf.data.Dataset:
  """One cohort from clients' example structures (e.g. `(x, y)`, in training
  order, or `StoredExamples` a worker reads) and group vectors; `slots` >
  len pads with empty clients. `canary_rows` (a process built with
  canaries): each client's row, `canaries.NOT_A_CANARY` for real ones."""
  k = len(client_data)
  slots = k if slots is None else slots
  if not 0 < k <= slots:
    raise ValueError(f'{k} clients do not fit in {slots} cohort slots.')
  groups = np.zeros((slots, num_groups), np.float32)
  groups[:k] = np.asarray(one_hots, np.float32)
  extra = []
  if canary_rows is not None:
    rows = np.full(slots, canaries_lib.NOT_A_CANARY, np.int32)
    rows[:k] = canary_rows
    extra.append((canaries_lib.CANARY_KEY, rows))
  if isinstance(client_data[0], federated_task.StoredExamples):
    return _pack_read_on_worker(client_data, groups, extra)
  data, counts = pad_examples(client_data, slots)
  return tf.data.Dataset.from_tensors(
      collections.OrderedDict([(DATA_KEY, data), (COUNT_KEY, counts),
                               (GROUP_KEY, groups), *extra]))


def _pack_read_on_worker(clients: Sequence[federated_task.StoredExamples],
                         groups: np.ndarray, extra) -> tf.data.Dataset:
  """`pack_cohort` of stored clients: the worker that runs the dataset reads
  and pads their examples (`federated_task.read_on_worker`), the driver sends
  keys and orders. Empty slots are zero-length clients, so `padded_batch`
  gives the values of `pad_examples`."""
  examples = federated_task.read_on_worker(clients)
  counts = np.zeros(len(groups), np.int32)
  counts[:len(clients)] = [len(c.order) for c in clients]
  empty = tf.nest.map_structure(
      lambda s: tf.zeros([0] + s.shape.as_list()[1:], s.dtype),
      examples.element_spec)
  examples = examples.concatenate(
      tf.data.Dataset.from_tensors(empty).repeat(len(groups) - len(clients)))
  return examples.padded_batch(len(groups)).map(
      lambda *data: collections.OrderedDict([
          (DATA_KEY, data), (COUNT_KEY, tf.constant(counts)),
          (GROUP_KEY, tf.constant(groups)),
          *[(key, tf.constant(value)) for key, value in extra]]))


def split(values: Sequence, cohort_size: int) -> list[Sequence]:
  """`values` cut into the fewest balanced cohorts (`split_sizes`), in order."""
  parts, start = [], 0
  for size in split_sizes(len(values), cohort_size):
    parts.append(values[start:start + size])
    start += size
  return parts


def pack_round(client_data: Sequence, one_hots: Sequence[np.ndarray],
               num_groups: int, cohort_size: int,
               canary_rows: Sequence[int] | None = None
               ) -> list[tf.data.Dataset]:
  """A round's sampled clients as the fewest balanced cohorts (`canary_rows`:
  see `pack_cohort`)."""
  rows = (split(canary_rows, cohort_size) if canary_rows is not None else
          [None] * len(split_sizes(len(client_data), cohort_size)))
  return [pack_cohort(data, groups, num_groups, canary_rows=r)
          for data, groups, r in zip(split(client_data, cohort_size),
                                     split(one_hots, cohort_size), rows)]


def train_slot(data, k, n, epochs: int, batch_size: int, step, state):
  """`state = step(state, batch)` over slot k's batches of its n examples,
  in order, `epochs` times: the batches of the per-client dataset
  `batch(batch_size).repeat(epochs)`. In-graph (autograph) loops."""
  for _ in range(epochs):
    for start in tf.range(0, n, batch_size):
      end = tf.minimum(start + batch_size, n)
      batch = tf.nest.map_structure(
          lambda t: t[k, start:end], data)  # pylint: disable=cell-var-from-loop
      state = step(state, batch)
  return state


def _build_cohort_training(model_fn, epochs: int, batch_size: int,
                           directions: canaries_lib.CanaryDirections | None):
  """The tf.function that trains every client of a cohort in turn (a
  canary's update is its direction, `canaries.replace_if_canary`; a cohort
  of canaries only, as `Execution.round_data` packs them, gets all its
  updates at once without the training loop)."""
  model = model_fn()
  # Keras metrics (loss, accuracy, counts) live in the local variables; a
  # dropped client's contribution to them is undone from a snapshot.
  metric_vars = list(model.local_variables)

  @tf.function
  def train(optimizer, optimizer_hparams, initial_weights, cohort):
    cohort = cohort.get_single_element()
    groups = cohort[GROUP_KEY]
    initial = tf.nest.flatten(initial_weights.trainable)
    if directions is not None:
      rows = cohort[canaries_lib.CANARY_KEY]
      if tf.reduce_all(rows >= 0):
        return client_work_lib.train_output(
            model, tf.nest.pack_sequence_as(
                initial_weights.trainable,
                directions.stacked_updates(rows, initial)),
            groups, tf.constant(0, tf.int64), tf.constant(0, tf.int32))
      else:
        return train_each(optimizer, optimizer_hparams, initial_weights,
                          cohort)
    return train_each(optimizer, optimizer_hparams, initial_weights, cohort)

  def train_each(optimizer, optimizer_hparams, initial_weights, cohort):
    """Every slot of `cohort` trained in turn (in-graph loop)."""
    data, counts, groups = cohort[DATA_KEY], cohort[COUNT_KEY], cohort[
        GROUP_KEY]
    weights = tff.learning.models.ModelWeights.from_model(model)
    trainable = tf.nest.flatten(weights.trainable)
    initial = tf.nest.flatten(initial_weights.trainable)
    specs = tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)
    num_clients = tf.shape(counts)[0]
    updates = [tf.TensorArray(v.dtype, size=num_clients, element_shape=v.shape)
               for v in trainable]
    weights_out = tf.TensorArray(tf.float32, size=num_clients,
                                 element_shape=groups.shape[1:])
    num_examples = tf.constant(0, tf.int64)
    non_finite = tf.constant(0, tf.int32)
    for k in tf.range(num_clients):
      tf.nest.map_structure(lambda v, t: v.assign(t), weights, initial_weights)
      saved = [tf.identity(v.read_value()) for v in metric_vars]
      opt_state = optimizer.set_hparams(optimizer.initialize(specs),
                                        optimizer_hparams)

      def step(state, batch):
        opt_state, num_examples = state
        opt_state, batch_examples = client_work_lib.local_step(
            model, optimizer, opt_state, batch)
        return opt_state, num_examples + batch_examples

      _, num_examples = train_slot(data, k, counts[k], epochs, batch_size,
                                   step, (opt_state, num_examples))
      update = [i - v for i, v in zip(initial, trainable)]
      if directions is not None:
        update = canaries_lib.replace_if_canary(
            directions, cohort[canaries_lib.CANARY_KEY][k], update)
      update, weight, finite = client_work_lib.drop_if_non_finite(
          update, groups[k])
      if not finite:
        non_finite += 1
        for v, s in zip(metric_vars, saved):
          v.assign(s)
      updates = [ta.write(k, u) for ta, u in zip(updates, update)]
      weights_out = weights_out.write(k, weight)
    update = tf.nest.pack_sequence_as(initial_weights.trainable,
                                      [ta.stack() for ta in updates])
    return client_work_lib.train_output(model, update, weights_out.stack(),
                                        num_examples, non_finite)

  return train


def build_cohort_client_work(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_optimizer: tff.learning.optimizers.Optimizer,
    num_groups: int,
    batch_size: int,
    epochs: int = 1,
    directions: canaries_lib.CanaryDirections | None = None
) -> tff.learning.templates.ClientWorkProcess:
  """`ClientWorkProcess` training cohorts: E epochs of batch-`batch_size`
  steps per simulated client; the update is the clients' stacked
  pseudo-gradients (a canary's: its direction), the weight their stacked
  group rows.

  Measurements (train metrics, `num_examples`, `num_non_finite_updates`) are
  those of the per-client client work over the same simulated clients.

  Args:
    model_fn: builds the TFF model.
    client_optimizer: the clients' local optimizer.
    num_groups: l, the length of each one-hot privacy-group row.
    batch_size: examples per local step of a simulated client.
    epochs: E, local epochs per round.
    directions: canaries' directions (cohorts then carry canary rows).

  Returns:
    The `tff.learning.templates.ClientWorkProcess` of
    `client_work.build_client_work_process` for cohort data
    (`cohort_data_type`).

  Raises:
    ValueError: if `epochs` or `batch_size` is less than 1.
  """
  if epochs < 1:
    raise ValueError(f'local epochs must be >= 1, got {epochs}.')
  if batch_size < 1:
    raise ValueError(f'batch size must be >= 1, got {batch_size}.')
  return client_work_lib.build_client_work_process(
      model_fn, client_optimizer,
      lambda spec: cohort_data_type(spec, num_groups, directions is not None),
      lambda: _build_cohort_training(model_fn, epochs, batch_size,
                                     directions))


def build_cohort_fedhdp(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    aggregator: heterogeneous_dp.CohortHeterogeneousDPFactory,
    num_groups: int,
    client_optimizer: tff.learning.optimizers.Optimizer,
    batch_size: int,
    server_optimizer: tff.learning.optimizers.Optimizer | None = None,
    local_epochs: int = 1,
    directions: canaries_lib.CanaryDirections | None = None
) -> tff.learning.templates.LearningProcess:
  """FedHDP whose TFF clients are cohorts (`pack_round`): same rounds as
  `fedhdp.build_fedhdp` on the same clients, a fraction of TFF's overhead.

  Args:
    model_fn: builds the TFF model.
    aggregator: the server rule; it receives each cohort's stacked updates
      weighted by their [K, l] group rows.
    num_groups: l, the number of privacy groups.
    client_optimizer: the clients' local optimizer.
    batch_size: examples per local step of a simulated client.
    server_optimizer: applies the aggregate (None: SGD with learning rate 1,
      see `learning_process.compose`).
    local_epochs: E, local epochs per round.
    directions: canaries' directions: cohorts carry canary rows, and the
      process keeps their scores (`canaries.track_scores`).

  Returns:
    The `tff.learning.templates.LearningProcess`.

  Raises:
    ValueError: if `local_epochs` or `batch_size` is less than 1.
    TypeError: if `aggregator` refuses float32[?, num_groups] weights (e.g. a
      factory of another number of groups).
  """
  work = build_cohort_client_work(model_fn, client_optimizer, num_groups,
                                  batch_size, local_epochs, directions)
  stacked_update = work.next.type_signature.result.result.member.update
  process = learning_process.compose(
      model_fn, work, aggregator,
      tff.TensorType(np.float32, [None, num_groups]), server_optimizer,
      value_type=stacked_update)
  if directions is None:
    return process
  return canaries_lib.track_scores(process, directions)
