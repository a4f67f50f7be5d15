"""Lockstep training: a cohort's clients take their local steps together.

The cohort loop (`tff_hdp.learning.cohort`) trains its K simulated clients one
after another, so every local step pays TensorFlow's per-op cost K times. Here
the clients' weights (and optimizer states) are stacked `[K, ...]` and each
step is one computation for all K: TFF's `FunctionalModel` of the Keras model
(the model as a pure function of its weights) vectorized over the clients by
`tf.vectorized_map`, so a Dense layer becomes one batched matmul.

Client k still takes exactly its own steps: its examples in its order, in
batches of `batch_size` (the last one short), `epochs` times, each step a
gradient of the mean loss over its real examples and its own optimizer step.
Its t-th step uses batch `t mod ceil(n_k / B)`; once its `epochs * ceil(n_k /
B)` steps are taken it idles (weights and optimizer state held). Nothing mixes
between clients: rows of a vectorized computation are independent, so a
client whose update goes non-finite is dropped alone, as in the loop.

Only models that are a pure, per-example function of their trainable weights
qualify (`supports`): no non-trainable variables (BatchNormalization),
no regularization losses, no random layers. Others keep the cohort loop.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.federated_task import KerasParts

# Layers whose training-mode forward pass is deterministic, stateless and
# per-example: the lockstep computation is exactly the per-client one.
_PURE_LAYERS = (
    tf.keras.layers.InputLayer, tf.keras.layers.Dense, tf.keras.layers.Conv1D,
    tf.keras.layers.Conv2D, tf.keras.layers.MaxPooling1D,
    tf.keras.layers.MaxPooling2D, tf.keras.layers.AveragePooling1D,
    tf.keras.layers.AveragePooling2D, tf.keras.layers.GlobalAveragePooling1D,
    tf.keras.layers.GlobalAveragePooling2D, tf.keras.layers.Flatten,
    tf.keras.layers.Reshape, tf.keras.layers.Activation,
    tf.keras.layers.ReLU, tf.keras.layers.Softmax)

# Metrics `tff.learning.models.from_keras_model` adds to a task's own.
_LOSS, _NUM_EXAMPLES, _NUM_BATCHES = 'loss', 'num_examples', 'num_batches'


def supports(parts: KerasParts) -> bool:
  """Whether the model qualifies: pure layers only, one output, every weight
  trainable, no regularization losses."""
  model = parts.keras_model_fn()
  return (all(isinstance(l, _PURE_LAYERS) for l in model.layers)
          and len(model.outputs) == 1 and not model.non_trainable_weights
          and not model.losses)


def _functional_model(parts: KerasParts):
  """TFF's FunctionalModel of the task, its loss per example (no reduction)."""
  loss = parts.loss_fn()
  loss.reduction = tf.keras.losses.Reduction.NONE
  return tff.learning.models.functional_model_from_keras(
      parts.keras_model_fn(), loss, parts.input_spec)


def _split_batch(batch):
  """(x, y) of a batch, as `from_keras_model` reads it."""
  if isinstance(batch, collections.abc.Mapping):
    return batch['x'], batch['y']
  return batch[0], batch[1]


def _step_batches(data, counts, epochs: int, batch_size: int, t):
  """Every client's batch at lockstep step t, `[K, B, ...]` per leaf, with its
  `[K, B]` float mask of real examples and the `[K]` clients still training."""
  batches = (counts + batch_size - 1) // batch_size
  active = t < epochs * batches
  first = (t % tf.maximum(batches, 1)) * batch_size
  index = first[:, None] + tf.range(batch_size)[None]
  mask = tf.logical_and(active[:, None], index < counts[:, None])
  n_max = tf.shape(tf.nest.flatten(data)[0])[1]
  index = tf.minimum(index, n_max - 1)
  batch = tf.nest.map_structure(
      lambda d: tf.gather(d, index, batch_dims=1), data)
  return batch, tf.cast(mask, tf.float32), active


def num_steps(counts, epochs: int, batch_size: int):
  """Lockstep steps a cohort needs: its busiest client's local steps."""
  return epochs * tf.reduce_max(
      tf.concat([(counts + batch_size - 1) // batch_size, [0]], 0))


def _mean_loss_and_output(model, weights, batch, mask):
  """One client's mean loss over its real examples, and its predictions."""
  x, y = _split_batch(batch)
  output = model.predict_on_batch((tuple(weights), ()), x, True)
  losses = model.loss(output, y)
  losses = tf.where(mask > 0, losses, tf.zeros_like(losses))
  return tf.reduce_sum(losses) / tf.maximum(tf.reduce_sum(mask), 1.0), output


def _hold(active, new, old):
  """`new` for the clients still training, `old` for those done."""
  def pick(n, o):
    shape = tf.concat([tf.shape(active), tf.ones([tf.rank(n) - 1], tf.int32)],
                      0)
    return tf.where(tf.reshape(active, shape), n, o)
  return tf.nest.map_structure(pick, new, old)


def _stack(value, num_clients):
  """`value` repeated for every client, `[K, ...]`."""
  def tile(v):
    v = tf.convert_to_tensor(v)
    return tf.tile(v[None], tf.concat([[num_clients], tf.ones([tf.rank(v)],
                                                              tf.int32)], 0))
  return tf.nest.map_structure(tile, value)


def finite_rows(stacked) -> tf.Tensor:
  """`[K]`: whether each client's row of every stacked tensor is finite."""
  return tf.reduce_all(tf.stack([
      tf.reduce_all(tf.reshape(tf.math.is_finite(t), [tf.shape(t)[0], -1]), 1)
      for t in tf.nest.flatten(stacked)]), 0)


@dataclasses.dataclass(frozen=True)
class LockstepModel:
  """A task's model as lockstep training runs it: TFF's FunctionalModel
  (loss per example), the names of the TFF model's unfinalized metrics and
  the builder of the task's own Keras metrics among them."""

  functional: tff.learning.models.FunctionalModel
  metric_names: tuple[str, ...]
  metrics_fn: Callable[[], list[tf.keras.metrics.Metric]]


def lockstep_model(model_fn, parts: KerasParts) -> LockstepModel:
  """The `LockstepModel` of `parts`, whose TFF model `model_fn` builds.
  Call it eagerly (TFF reads the Keras model's initial weights)."""
  with tf.Graph().as_default():
    names = tuple(model_fn().metric_finalizers())
    own = {m.name for m in parts.metrics_fn()}
  unknown = set(names) - own - {_LOSS, _NUM_EXAMPLES, _NUM_BATCHES}
  if unknown:
    raise ValueError(f'lockstep training cannot compute metrics {unknown}.')
  return LockstepModel(_functional_model(parts), names, parts.metrics_fn)


def build_training(model: LockstepModel, epochs: int, batch_size: int):
  """`train(optimizer, hparams, initial_weights, data, counts, groups)`: a
  cohort's local training in lockstep, returning what the cohort loop's
  client work returns (`client_work.train_output`).

  Its results equal the loop's: updates, weights, counts and the train
  metrics of the clients whose updates are finite (each metric is updated
  once per step with the real examples of those clients). Call it inside a
  tf.function; it creates the metrics' variables when called here.
  """
  metrics = {m.name: m for m in model.metrics_fn()}
  names = model.metric_names
  model = model.functional

  def train(optimizer, optimizer_hparams, initial_weights, data, counts,
            groups):
    num_clients = tf.shape(counts)[0]
    initial = [tf.convert_to_tensor(w)
               for w in tf.nest.flatten(initial_weights.trainable)]
    specs = tuple(tf.TensorSpec(w.shape, w.dtype) for w in initial)
    opt_state = _stack(optimizer.set_hparams(optimizer.initialize(specs),
                                             optimizer_hparams), num_clients)
    weights = _stack(initial, num_clients)
    loss_sum = tf.zeros([num_clients])
    outputs = tf.TensorArray(tf.float32, size=0, dynamic_size=True,
                             infer_shape=False)

    def client_step(args):
      w, state, batch, mask = args
      with tf.GradientTape() as tape:
        tape.watch(w)
        loss, output = _mean_loss_and_output(model, w, batch, mask)
      grads = tape.gradient(loss, w)
      state, w = optimizer.next(state, tuple(w), tuple(grads))
      return list(w), state, loss, output

    steps = num_steps(counts, epochs, batch_size)
    for t in tf.range(steps):
      batch, mask, active = _step_batches(data, counts, epochs, batch_size, t)
      new_w, new_state, loss, output = tf.vectorized_map(
          client_step, (weights, opt_state, batch, mask))
      weights = _hold(active, new_w, weights)
      opt_state = _hold(active, new_state, opt_state)
      loss_sum += loss * tf.reduce_sum(mask, 1)
      outputs = outputs.write(t, output)

    update = [i[None] - w for i, w in zip(initial, weights)]
    finite = finite_rows(update)
    keep = tf.cast(finite, tf.float32)
    update = _hold(finite, update, tf.nest.map_structure(tf.zeros_like,
                                                         update))
    real_examples = tf.constant(0.0)
    real_batches = tf.constant(0.0)
    for t in tf.range(steps):
      batch, mask, active = _step_batches(data, counts, epochs, batch_size, t)
      _, y = _split_batch(batch)
      weight = tf.reshape(mask * keep[:, None], [-1])
      output = outputs.read(t)
      output = tf.reshape(output, tf.concat([[-1], tf.shape(output)[2:]], 0))
      output = tf.where(
          tf.reshape(weight > 0, tf.concat([[-1], tf.ones(
              [tf.rank(output) - 1], tf.int32)], 0)), output,
          tf.zeros_like(output))
      y = tf.reshape(y, tf.concat([[-1], tf.shape(y)[2:]], 0))
      for m in metrics.values():
        m.update_state(y, output, sample_weight=weight)
      real_examples += tf.reduce_sum(weight)
      real_batches += tf.reduce_sum(tf.cast(active, tf.float32) * keep)
    unfinalized = collections.OrderedDict()
    for name in names:
      if name == _LOSS:
        unfinalized[name] = [
            tf.reduce_sum(tf.where(finite, loss_sum, 0.0)), real_examples]
      elif name == _NUM_EXAMPLES:
        unfinalized[name] = [tf.cast(real_examples, tf.int64)]
      elif name == _NUM_BATCHES:
        unfinalized[name] = [tf.cast(real_batches, tf.int64)]
      else:
        unfinalized[name] = [v.read_value() for v in metrics[name].variables]
    num_examples = tf.cast(epochs * tf.reduce_sum(counts), tf.int64)
    return (tff.learning.templates.ClientResult(
        update=tf.nest.pack_sequence_as(initial_weights.trainable, update),
        update_weight=groups * keep[:, None]),
            unfinalized,
            collections.OrderedDict(
                num_examples=num_examples,
                num_non_finite_updates=num_clients - tf.reduce_sum(
                    tf.cast(finite, tf.int32))))

  return train


def build_personal_training(model: LockstepModel, epochs: int,
                            batch_size: int, lambdas, learning_rate: float):
  """`train(global_weights, personal, data, counts, groups)`: Ditto's
  personal steps of a cohort in lockstep, returning the new stacked personal
  models (`ditto.build_cohort_personalization`).

  Client k steps `theta_k -= eta_p (grad f_k(theta_k) + lambda_k (theta_k -
  theta^t))` on its own batches, lambda_k chosen by its group row; a personal
  model that goes non-finite is not kept. Call it inside a tf.function.
  """
  functional = model.functional

  def train(global_weights, personal, data, counts, groups):
    anchor = [tf.convert_to_tensor(w)
              for w in tf.nest.flatten(global_weights.trainable)]
    start = [tf.convert_to_tensor(p) for p in tf.nest.flatten(personal)]
    lam = tf.linalg.matvec(groups, tf.constant(lambdas, tf.float32))

    def client_step(args):
      w, lam_k, batch, mask = args
      with tf.GradientTape() as tape:
        tape.watch(w)
        loss, _ = _mean_loss_and_output(functional, w, batch, mask)
      grads = tape.gradient(loss, w)
      return [v - learning_rate * (g + lam_k * (v - a))
              for v, g, a in zip(w, grads, anchor)]

    weights = start
    for t in tf.range(num_steps(counts, epochs, batch_size)):
      batch, mask, active = _step_batches(data, counts, epochs, batch_size, t)
      weights = _hold(active, tf.vectorized_map(
          client_step, (weights, lam, batch, mask)), weights)
    kept = _hold(finite_rows(weights), weights, start)
    return tf.nest.pack_sequence_as(personal, kept)

  return train


class GraphFunction:
  """`fn` run as a TF1 graph and session, for callers outside TFF.

  TFF's FunctionalModel of a Keras model works only under a graph (inside a
  TFF computation it is one); an eager caller such as the cohort Ditto step
  gets one here, built at the first call with every argument's leading
  `unknown_dims[i]` dimensions unknown, so cohorts of any K and n_max share
  it. Returns NumPy values.
  """

  def __init__(self, fn: Callable, unknown_dims: tuple[int, ...]) -> None:
    """Initializes `GraphFunction`.

    Args:
      fn: builds the computation from its arguments' tensors.
      unknown_dims: per positional argument, how many leading dimensions of
        each of its leaves vary between calls.
    """
    self._fn = fn
    self._unknown_dims = unknown_dims
    self._built = None

  def _build(self, args):
    graph = tf.Graph()
    with graph.as_default():
      placeholders = [
          tf.nest.map_structure(
              lambda v, n=n: tf.compat.v1.placeholder(
                  tf.as_dtype(v.dtype),
                  [None] * n + list(v.shape[n:])), arg)
          for arg, n in zip(args, self._unknown_dims)]
      outputs = tf.function(self._fn)(*placeholders)
    return tf.compat.v1.Session(graph=graph), placeholders, outputs

  def __call__(self, *args):
    args = tf.nest.map_structure(np.asarray, args)
    if self._built is None:
      self._built = self._build(args)
    session, placeholders, outputs = self._built
    feed = dict(zip(tf.nest.flatten(placeholders), tf.nest.flatten(args)))
    return session.run(outputs, feed)
