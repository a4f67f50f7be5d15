"""Sample-level DP-SGD inside each client, for a server nobody trusts.

SPEC.md §2-3: a client clips every example's gradient to `c`, adds
`N(0, (z c)^2 I)` to the sum and divides by its expected batch size `q n`. Each
example joins a step independently with probability `q`, which is exactly the
Poisson-subsampled Gaussian that `tff_hdp.privacy.accounting` composes over the steps
(sample the way you account). The clipped sum never loops over examples:
Dense and conv layers get their per-example gradients from one backward pass
(`clipped_gradient_sum`), anything else from a forward and backward pass per
example, vectorized by pfor (`per_example_gradients`).

`private_mean_gradient` is the reusable step: MR-MTL adds its data-independent
regularizer gradient to its result. The client work of "one local epoch of
DP-SGD per round" takes each client's own noise multiplier, sampling rate,
steps and aggregation weight from its client data, so the aggregator never
sees them.
"""

from __future__ import annotations

import collections
from typing import Callable, Mapping

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.privacy import plans
from tff_hdp.aggregators import clipping
from tff_hdp.learning import canaries as canaries_lib

DATA_KEY = 'data'
PRIVACY_KEY = 'privacy'
INDEX_KEY = 'index'


def poisson_sample(num_examples, rate, seed) -> tf.Tensor:
  """Indices of the examples that join a step, each with probability `rate`."""
  keep = tf.random.stateless_uniform([num_examples], seed) < rate
  return tf.reshape(tf.where(keep), [-1])


def per_example_gradients(per_example_loss_fn: Callable[[object], tf.Tensor],
                          inputs, variables) -> list[tf.Tensor]:
  """`[B, *v.shape]` gradients of each example's loss, vectorized by pfor.

  `per_example_loss_fn(batch)` maps a structure of `[b, ...]` tensors (e.g.
  `(x, y)`) to the `[b]` losses; `inputs` is the batch. Each example runs its
  own forward and backward pass (`tf.vectorized_map` over batches of one), so
  a non-finite value in one example never reaches another's gradient, as it
  would through a batch jacobian (a weight gradient sums rows: 0 * NaN).
  """
  variables = list(variables)

  def one(example):
    single = tf.nest.map_structure(lambda t: t[tf.newaxis], example)
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(per_example_loss_fn(single))
    return tape.gradient(loss, variables,
                         unconnected_gradients=tf.UnconnectedGradients.ZERO)

  return tf.vectorized_map(one, inputs)


def clipped_sum(per_example_grads, clip_norm) -> list[tf.Tensor]:
  """Sum over examples of `g * c / max(||g||, c)`, norms over all variables.

  An example whose norm is not finite adds zero (`safe_clip_scale`).
  """
  squares = [
      tf.reduce_sum(tf.reshape(g * g, [tf.shape(g)[0], -1]), axis=1)
      for g in per_example_grads
  ]
  norms = tf.sqrt(tf.add_n(squares))
  scale, finite = clipping.safe_clip_scale(norms, clip_norm)
  return [tf.tensordot(scale, clipping.zero_rows(g, finite), axes=1)
          for g in per_example_grads]


def _per_layer_op(variable, graph):
  """The one op that uses `variable` if its gradient can be taken per layer.

  That is: the variable is read once, and the read feeds only a `MatMul`
  (untransposed, Dense), an NHWC `Conv2D` ('SAME'/'VALID', no groups, not on
  `SpaceToBatchND` blocks) or a channels-last `BiasAdd`, as its second input.
  Anything else returns None and the variable goes through
  `per_example_gradients`.
  """
  try:
    handle = graph.capture(variable.handle)
  except (AttributeError, TypeError, ValueError):
    return None
  reads = handle.consumers()
  if len(reads) != 1 or reads[0].type != 'ReadVariableOp':
    return None
  users = reads[0].outputs[0].consumers()
  if len(users) != 1 or len(users[0].inputs) < 2:
    return None
  op = users[0]
  if op.inputs[1] is not reads[0].outputs[0]:
    return None
  activations = op.inputs[0]
  if op.type == 'MatMul':
    ok = (activations.shape.rank == 2 and not op.get_attr('transpose_a') and
          not op.get_attr('transpose_b'))
  elif op.type == 'Conv2D':
    kernel_shape = op.inputs[1].shape
    # Keras runs a dilated conv as an undilated one on SpaceToBatchND
    # blocks, whose rows are not examples (a Conv2D's own `dilations` are
    # fine: the patches take them).
    ok = (activations.shape.rank == 4 and
          activations.op.type != 'SpaceToBatchND' and
          op.get_attr('data_format') == b'NHWC' and
          op.get_attr('padding') in (b'SAME', b'VALID') and
          kernel_shape.rank == 4 and kernel_shape.is_fully_defined() and
          activations.shape[3] == kernel_shape[2])
  elif op.type == 'BiasAdd':
    ok = (activations.shape.rank is not None and
          activations.shape.rank >= 2 and
          op.get_attr('data_format') == b'NHWC')
  else:
    ok = False
  return op if ok else None


def _conv_per_example_kernel_gradients(op, output_grads):
  """`[B, kh * kw * c_in, c_out]` gradients of a Conv2D's kernel, by patches."""
  kh, kw = op.inputs[1].shape.as_list()[:2]
  patches = tf.image.extract_patches(
      op.inputs[0], [1, kh, kw, 1], op.get_attr('strides'),
      op.get_attr('dilations'), op.get_attr('padding').decode())
  return tf.einsum('bhwk,bhwc->bkc', patches, output_grads)


# Above this ratio of an example's expanded terms to its squared norm, the
# expanded norm of a shifted gradient may have lost more than 1e-7 of its
# value to float64 rounding (about 1e-15 of the terms): the batch's norms
# are then taken from the materialized per-example gradients.
_CANCELLATION_RATIO = 1e8


def clipped_gradient_sum(per_example_loss_fn: Callable[[object], tf.Tensor],
                         inputs, variables, clip_norm,
                         shift=None) -> list[tf.Tensor]:
  """`clipped_sum(per_example_gradients(...))`, per layer where it can.

  With `shift` (one tensor per variable), every example's gradient is
  `g_i + shift` before it is clipped: the gradient of a loss term all
  examples share, such as MR-MTL's `lambda/2 ||w - w_bar||^2` inside the
  per-example loss. The clipped sum is `sum_i s_i g_i + (sum_i s_i) shift`.
  A gradient that nearly cancels the shift has a small norm made of large
  parts, so with a shift every per-example quantity is float64: a Dense
  kernel's norm `||a_i||^2 ||g_i||^2 + 2 a_i^T S g_i + ||S||^2` (expanded,
  never materialized), other variables' `||g_i + S||^2` directly, the
  clipped sum too; and where the expanded terms exceed the norm by
  `_CANCELLATION_RATIO` (float64 rounding could then hide 1e-7 of it), the
  batch's Dense norms come from the materialized `a_i g_i^T + S`, exact up
  to one rounding. So no example adds more than c (1 + 1e-7) however its
  gradient cancels the shift.

  `per_example_gradients` runs a forward and backward pass per example. In
  graph mode (a
  `tf.function`), variables used by a single Dense `MatMul`, NHWC `Conv2D` or
  `BiasAdd` in the graph of `per_example_loss_fn` get their per-example
  gradients from one backward pass instead: the gradient `g` of the summed
  loss with respect to the op's output has example `i`'s gradient in row `i`,
  so a Dense kernel's is `a_i g_i^T` with norm `||a_i|| ||g_i||` (never
  materialized) and a conv kernel's is its input patches times `g_i`. Other
  variables (other ops, shared weights, a model called through a nested
  `tf.function` op) and eager mode fall back to `per_example_gradients`; the
  clip is
  joint over all of them either way. Row `i` is example `i` only if examples
  do not interact (no batch statistics), which DP-SGD's per-example
  sensitivity needs anyway; an op input whose first dimension is not the
  batch fails a runtime check. An example whose norm is not finite (a NaN
  input, an overflow) adds zero, as in `clipped_sum`.
  """
  variables = list(variables)
  batch = tf.shape(tf.nest.flatten(inputs)[0])[0]
  wide = (lambda t: tf.cast(t, tf.float64)) if shift is not None else (
      lambda t: t)
  ops = [None] * len(variables)
  if not tf.executing_eagerly():
    with tf.GradientTape() as tape:
      losses = per_example_loss_fn(inputs)
    graph = tf.compat.v1.get_default_graph()
    ops = [_per_layer_op(v, graph) for v in variables]
  layered = [i for i, op in enumerate(ops) if op is not None]
  rest = [i for i, op in enumerate(ops) if op is None]
  grads = [None] * len(variables)
  output_grads = tape.gradient(
      losses, [ops[i].outputs[0] for i in layered],
      output_gradients=tf.ones_like(losses),
      unconnected_gradients=tf.UnconnectedGradients.ZERO) if layered else []
  if rest:
    for i, g in zip(rest, per_example_gradients(
        per_example_loss_fn, inputs, [variables[i] for i in rest])):
      grads[i] = g
  # A Dense kernel's squared norms, expanded (and the sizes of their terms),
  # and every other variable's, direct.
  expanded, magnitudes, direct = [], [], []
  pieces = {}
  for i, g in zip(layered, output_grads):
    op = ops[i]
    checks = [tf.debugging.assert_equal(
        tf.shape(op.inputs[0])[0], batch,
        message='per-layer gradients need one input row per example')]
    with tf.control_dependencies(checks):
      if op.type == 'MatMul':
        a, g = wide(op.inputs[0]), wide(g)
        expanded.append(
            tf.reduce_sum(a * a, axis=1) * tf.reduce_sum(g * g, axis=1))
        if shift is not None:  # <a_i g_i^T, S> = a_i^T S g_i
          cross = 2.0 * tf.reduce_sum(tf.matmul(a, wide(shift[i])) * g, axis=1)
          magnitudes += [expanded[-1], tf.abs(cross)]
          expanded.append(cross)
        pieces[i] = (a, g)
      else:
        if op.type == 'BiasAdd':
          g = tf.reduce_sum(tf.reshape(g, [batch, -1, tf.shape(g)[-1]]), 1)
        else:
          g = _conv_per_example_kernel_gradients(op, g)
        grads[i] = g
  for i, g in enumerate(grads):
    if g is None:
      continue
    g = grads[i] = wide(g)
    shifted = g if shift is None else (
        g + tf.reshape(wide(shift[i]), tf.shape(g)[1:])[tf.newaxis])
    direct.append(tf.reduce_sum(tf.reshape(shifted * shifted, [batch, -1]),
                                axis=1))
  if shift is not None and pieces:
    expanded.append(tf.fill([batch], tf.add_n(
        [tf.reduce_sum(wide(shift[i]) ** 2) for i in pieces])))
    magnitudes.append(expanded[-1])
  squared_norms = tf.add_n(expanded + direct)
  if magnitudes:
    def materialized():
      exact = []
      for i, (a, g) in pieces.items():
        full = a[:, :, None] * g[:, None, :] + wide(shift[i])[tf.newaxis]
        exact.append(tf.reduce_sum(full * full, axis=[1, 2]))
      return tf.add_n(exact + direct)

    cancelling = tf.reduce_any(
        tf.add_n(magnitudes) > _CANCELLATION_RATIO * squared_norms)
    squared_norms = tf.cond(cancelling, materialized, lambda: squared_norms)
  norms = tf.sqrt(tf.maximum(squared_norms, 0.0))
  scale, finite = clipping.safe_clip_scale(norms,
                                           tf.cast(clip_norm, norms.dtype))
  summed = []
  for i, v in enumerate(variables):
    if i in pieces:
      # The product sums over rows: a dropped example's NaN in either factor
      # would reach every entry.
      a, g = (clipping.zero_rows(t, finite) for t in pieces[i])
      summed.append(tf.matmul(a, g * scale[:, None], transpose_a=True))
    else:
      summed.append(tf.reshape(
          tf.tensordot(scale, clipping.zero_rows(grads[i], finite), axes=1),
          tf.shape(v)))
  if shift is not None:
    total = tf.reduce_sum(scale)  # dropped examples have scale 0
    summed = [s + total * wide(t) for s, t in zip(summed, shift)]
  return [tf.cast(s, v.dtype) for s, v in zip(summed, variables)]


def standard_noise(variables, seed) -> list[tf.Tensor]:
  """A step's N(0, I) draws, one per variable, each from `seed` folded with
  the variable's index: what `private_mean_gradient` scales to its noise."""
  return [tf.random.stateless_normal(
      tf.shape(v), tf.random.experimental.stateless_fold_in(seed, i),
      dtype=v.dtype) for i, v in enumerate(variables)]


def private_mean_gradient(per_example_loss_fn: Callable[[object], tf.Tensor],
                          inputs, variables, batch_size, clip_norm,
                          noise_multiplier, expected_batch_size, seed,
                          shift=None):
  """One DP-SGD gradient: `(clipped sum + N(0, (z c)^2 I)) / B`.

  `inputs` are the `batch_size` sampled examples and `per_example_loss_fn`
  maps such a batch to its losses (see `per_example_gradients`); `shift` is
  added to every example's gradient before clipping
  (`clipped_gradient_sum`); an empty batch contributes noise only. Returns
  the noisy mean gradient and, separately, the noise it contains (for
  measuring noise power; never sent anywhere).
  """
  summed = tf.cond(
      batch_size > 0,
      lambda: clipped_gradient_sum(per_example_loss_fn, inputs, variables,
                                   clip_norm, shift),
      lambda: [tf.zeros_like(v) for v in variables])
  noise = [noise_multiplier * clip_norm * n / expected_batch_size
           for n in standard_noise(variables, seed)]
  return [s / expected_batch_size + n for s, n in zip(summed, noise)], noise


def split_batch(batch):
  """(x, y) of a batch given as a tuple or as a mapping with 'x' and 'y'."""
  if isinstance(batch, Mapping):
    return batch['x'], batch['y']
  return batch[0], batch[1]


def whole_dataset(data: tf.data.Dataset):
  """All of a client's examples as tensors: Poisson sampling needs them all."""
  return data.unbatch().batch(np.iinfo(np.int32).max).get_single_element()


# Where the pull `regularization * (w - anchor)` joins DP-SGD's gradient.
REGULARIZER_PER_EXAMPLE = 'per_example'  # in each example's gradient, clipped
REGULARIZER_AFTER_NOISE = 'after_noise'  # added to the noisy mean gradient
REGULARIZER_PLACEMENTS = (REGULARIZER_PER_EXAMPLE, REGULARIZER_AFTER_NOISE)


def build_local_dp_sgd(model: tff.learning.models.VariableModel,
                       per_example_loss: Callable[[tf.Tensor, tf.Tensor],
                                                  tf.Tensor],
                       learning_rate: float, clip_norm: float,
                       regularizer_placement: str = REGULARIZER_AFTER_NOISE,
                       canaries: canaries_lib.CanaryDirections | None = None
                       ) -> tf.types.experimental.GenericFunction:
  """tf.function: one round of DP-SGD steps on `model`, from given weights.

  Called with the initial `ModelWeights`, the client's data (its batched
  dataset, or all its examples as an `(x, y)` pair of tensors), its noise
  multiplier, sampling rate, number of steps and a `[2]` int64 seed.
  Returns the pseudo-gradient `initial - final` (TFF's convention) and the
  part of it that is DP noise. Pass the scalars as tensors so that clients
  with different settings share one trace. With an `anchor` (trainable
  weights), each step pulls toward it by `regularization * (w - anchor)`,
  the gradient of MR-MTL's and Ditto's `lambda/2 ||w - anchor||^2`: with
  `regularizer_placement` 'after_noise' added to the noisy mean gradient
  (data-independent, so it costs no privacy), with 'per_example' added to
  every example's gradient before clipping, as a term of the per-example
  loss (the MR-MTL authors' code). A `step_size` tensor given at call time
  replaces `learning_rate`, so that one trace serves a whole learning-rate
  sweep. With `canaries` and int32 [K] `canary_rows`, the client's data
  also holds K canary examples (`canaries.ExampleCanaries`): each joins a
  step with the sampling rate, by its own draw after the real examples'
  (which are sampled and noised exactly as without canaries), and adds its
  clipped gradient c v_r to the step's clipped sum.

  Args:
    model: the model whose variables the steps train.
    per_example_loss: `(y, predictions)` to the `[b]` losses.
    learning_rate: the step size when no `step_size` is given.
    clip_norm: c, the per-example clip norm.
    regularizer_placement: where the pull toward an `anchor` joins the
      gradient, one of `REGULARIZER_PLACEMENTS`.
    canaries: the directions of canary examples' gradients, if any.

  Returns:
    The tf.function `train(initial_weights, data, noise_multiplier,
    sampling_rate, steps, seed, regularization=0.0, anchor=None,
    step_size=None, canary_rows=None) -> (update, noise)`.
  """
  if regularizer_placement not in REGULARIZER_PLACEMENTS:
    raise ValueError(f'regularizer placement must be one of '
                     f'{REGULARIZER_PLACEMENTS}, got {regularizer_placement!r}.')
  weights = tff.learning.models.ModelWeights.from_model(model)
  trainable = tf.nest.flatten(weights.trainable)

  def loss_fn(batch):
    # The Python body of a `tf.function` forward pass, so that its ops land
    # in the calling graph, where `clipped_gradient_sum` can see them.
    predict = getattr(model.predict_on_batch, 'python_function',
                      model.predict_on_batch)
    x, y = batch
    return per_example_loss(y, predict(x, training=True))

  @tf.function
  def train(initial_weights, data, noise_multiplier, sampling_rate, steps,
            seed, regularization=0.0, anchor=None, step_size=None,
            canary_rows=None):
    tf.nest.map_structure(lambda v, t: v.assign(t), weights, initial_weights)
    x, y = split_batch(whole_dataset(data) if isinstance(
        data, tf.data.Dataset) else data)
    num_examples = tf.shape(x)[0]
    expected_batch_size = sampling_rate * tf.cast(num_examples, tf.float32)
    noise_total = [tf.zeros_like(v) for v in trainable]
    for t in tf.range(steps):
      step_seed = tf.random.experimental.stateless_fold_in(seed, t)
      idx = poisson_sample(
          num_examples, sampling_rate,
          tf.random.experimental.stateless_fold_in(step_seed, 0))

      pulls = None if anchor is None else [
          regularization * (v - a)
          for v, a in zip(trainable, tf.nest.flatten(anchor))]
      grads, noise = private_mean_gradient(
          loss_fn, (tf.gather(x, idx), tf.gather(y, idx)), trainable,
          tf.size(idx), clip_norm, noise_multiplier, expected_batch_size,
          tf.random.experimental.stateless_fold_in(step_seed, 1),
          shift=pulls if regularizer_placement == REGULARIZER_PER_EXAMPLE
          else None)
      if canary_rows is not None:
        picked = poisson_sample(
            tf.size(canary_rows), sampling_rate,
            tf.random.experimental.stateless_fold_in(step_seed, 2))
        inserted = canaries.gradient_sum(tf.gather(canary_rows, picked),
                                         trainable)
        grads = [g + clip_norm * c / expected_batch_size
                 for g, c in zip(grads, inserted)]
      if pulls is not None and (
          regularizer_placement == REGULARIZER_AFTER_NOISE):
        grads = [g + p for g, p in zip(grads, pulls)]
      lr = learning_rate if step_size is None else step_size
      for v, g in zip(trainable, grads):
        v.assign_sub(lr * g)
      noise_total = [a + lr * n for a, n in zip(noise_total, noise)]
    update = tf.nest.map_structure(tf.subtract, initial_weights.trainable,
                                   weights.trainable)
    return update, tf.nest.pack_sequence_as(initial_weights.trainable,
                                            noise_total)

  return train


def own_parameters(privacy: plans.ClientPrivacy, weight: float, seed: int,
                   steps: int | None = None,
                   index: int | None = None) -> collections.OrderedDict:
  """What a client knows of itself: its DP-SGD noise multiplier, sampling
  rate and steps per training call (default: the plan's steps per round),
  the weight it attaches to its update for a weighted aggregator, and its own
  noise seed (a real client would use fresh randomness; a simulation needs
  it reproducible and distinct); in an audit run, its index among the
  clients, which names its canaries (`canaries.ExampleCanaries`)."""
  own = collections.OrderedDict(
      noise_multiplier=np.float32(privacy.noise_multiplier),
      sampling_rate=np.float32(privacy.sampling_rate),
      steps=np.int32(privacy.steps_per_round if steps is None else steps),
      weight=np.float32(weight),
      seed=np.int64(seed))
  if index is not None:
    own[INDEX_KEY] = np.int32(index)
  return own


def make_client_data(dataset: tf.data.Dataset, privacy: plans.ClientPrivacy,
                     weight: float, seed: int, steps: int | None = None,
                     index: int | None = None) -> collections.OrderedDict:
  """A client's input: its batches and, as a one-element sequence,
  `own_parameters(privacy, weight, seed, steps, index)`."""
  return collections.OrderedDict([
      (DATA_KEY, dataset),
      (PRIVACY_KEY, tf.data.Dataset.from_tensors(
          own_parameters(privacy, weight, seed, steps, index))),
  ])


def client_data_type(model_input_spec, indexed: bool = False) -> tff.Type:
  """The type of `make_client_data`'s value (`indexed`: given an index)."""
  own = collections.OrderedDict(
      noise_multiplier=np.float32, sampling_rate=np.float32,
      steps=np.int32, weight=np.float32, seed=np.int64)
  if indexed:
    own[INDEX_KEY] = np.int32
  return tff.types.to_type(
      collections.OrderedDict([
          (DATA_KEY, tff.SequenceType(
              tff.types.tensorflow_to_type(model_input_spec))),
          (PRIVACY_KEY, tff.SequenceType(tff.types.to_type(own))),
      ]))


# The client work's state in an audit run (`build_dp_sgd_client_work`).
ROUND_KEY = 'round_num'
CANARY_DOTS_KEY = 'canary_dots'
UPDATE_SQUARED_NORMS_KEY = 'update_squared_norms'


def canary_scores(state) -> np.ndarray:
  """Each client's canary scores from an audit run's sums: float
  [clients, 2K], sum_t <u_t, v> / sqrt(sum_t ||u_t||^2) over the updates
  u_t the client sent (columns: its inserted canaries, then its unseen
  ones). What a server that sees every update can compute; with v
  independent of the updates it is N(0, 1/d) whatever the number of rounds,
  as one update's cosine is, and each round a canary joined adds to it."""
  dots = np.asarray(state[CANARY_DOTS_KEY], np.float64)
  norms = np.sqrt(np.asarray(state[UPDATE_SQUARED_NORMS_KEY], np.float64))
  with np.errstate(divide='ignore', invalid='ignore'):
    return np.where(norms[:, None] > 0, dots / norms[:, None], 0.0)


def no_canary_slots(canaries: canaries_lib.ExampleCanaries
                    ) -> collections.OrderedDict:
  """Zero sums of `<u, v>` per client and canary and of `||u||^2` per
  client: what `canary_slots` add to."""
  return collections.OrderedDict([
      (CANARY_DOTS_KEY, tf.zeros([canaries.num_clients,
                                  2 * canaries.per_client])),
      (UPDATE_SQUARED_NORMS_KEY, tf.zeros([canaries.num_clients]))])


def canary_slots(canaries: canaries_lib.ExampleCanaries, index, rows,
                 update) -> collections.OrderedDict:
  """`no_canary_slots` with client `index`'s row holding `<update, v>` for
  its `rows` ([2, K], `ExampleCanaries.rows`) and `||update||^2`: summed
  over clients (a federated sum), every client fills its own slot. A
  non-finite update, which reaches no aggregate, fills none."""
  flat = tf.nest.flatten(update)
  sent = tf.one_hot(index, canaries.num_clients)
  dots = canaries.directions.dots(flat, tf.reshape(rows, [-1]))
  squared = tf.add_n([tf.reduce_sum(u * u) for u in flat])
  finite = tf.math.is_finite(squared)
  return collections.OrderedDict([
      (CANARY_DOTS_KEY, tf.where(finite, sent[:, None] * dots, 0.0)),
      (UPDATE_SQUARED_NORMS_KEY, tf.where(finite, sent * squared, 0.0))])


def build_dp_sgd_client_work(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    per_example_loss: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
    learning_rate: float,
    clip_norm: float,
    canaries: canaries_lib.ExampleCanaries | None = None
) -> tff.learning.templates.ClientWorkProcess:
  """`ClientWorkProcess`: one local epoch of DP-SGD per round.

  Each client's noise multiplier, sampling rate, steps per round, update
  weight and noise seed come from the `privacy` element of its own data (see
  `make_client_data`); the server state is only the round number, folded into
  each client's seed so every round draws fresh noise. Only the update and its
  weight leave the client: training metrics on private data are not reported.

  With `canaries` (an audit run), each client's data also holds its K canary
  examples (its `index` names them) and the state also keeps, per client,
  the running sums of `<u_t, v>` over its 2K canaries and of `||u_t||^2`
  over the updates u_t it sent: what `canary_scores` reads. The server
  computes these from updates it receives anyway; the simulation has each
  client report them in its own slot of a federated sum.

  Args:
    model_fn: builds the TFF model.
    per_example_loss: `(y, predictions)` to the `[b]` losses.
    learning_rate: the DP-SGD step size.
    clip_norm: c, the per-example clip norm.
    canaries: the clients' canary examples, if any.

  Returns:
    A `tff.learning.templates.ClientWorkProcess` whose state is the round
    number (with canaries: an OrderedDict of it and the sums above) and
    whose measurements are empty.

  Raises:
    ValueError: if `learning_rate` or `clip_norm` is not > 0.
  """
  if not (learning_rate > 0 and clip_norm > 0):
    raise ValueError('learning rate and clip norm must be > 0, got '
                     f'{learning_rate} and {clip_norm}.')
  with tf.Graph().as_default():
    model = model_fn()
  weights_type = tff.learning.models.weights_type_from_model(model)
  data_type = client_data_type(model.input_spec, indexed=bool(canaries))
  directions = canaries.directions if canaries else None

  @tff.tensorflow.computation
  def initial_state():
    if not canaries:
      return tf.constant(0, tf.int64)
    return collections.OrderedDict([(ROUND_KEY, tf.constant(0, tf.int64)),
                                    *no_canary_slots(canaries).items()])

  @tff.federated_computation
  def init_fn():
    return tff.federated_eval(initial_state, tff.SERVER)

  state_type = init_fn.type_signature.result.member
  round_type = state_type[ROUND_KEY] if canaries else state_type

  @tff.tensorflow.computation(round_type, weights_type, data_type)
  def client_update(round_num, initial_weights, client_data):
    train = build_local_dp_sgd(model_fn(), per_example_loss, learning_rate,
                               clip_norm, canaries=directions)
    own = client_data[PRIVACY_KEY].get_single_element()
    rows = canaries.rows(own[INDEX_KEY]) if canaries else None
    update, _ = train(initial_weights, client_data[DATA_KEY],
                      own['noise_multiplier'], own['sampling_rate'],
                      own['steps'], tf.stack([own['seed'], round_num]),
                      canary_rows=None if rows is None else rows[0])
    result = tff.learning.templates.ClientResult(
        update=update, update_weight=own['weight'])
    if not canaries:
      return result
    return result, canary_slots(canaries, own[INDEX_KEY], rows, update)

  if canaries:
    sums_type = client_update.type_signature.result[1]

    @tff.tensorflow.computation(state_type, sums_type)
    def advance(state, sums):
      return collections.OrderedDict([
          (ROUND_KEY, state[ROUND_KEY] + 1),
          *((key, state[key] + sums[key]) for key in sums)])
  else:

    @tff.tensorflow.computation(state_type)
    def advance(state):
      return state + 1

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(weights_type, tff.CLIENTS),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, client_data):
    if not canaries:
      result = tff.federated_map(
          client_update,
          (tff.federated_broadcast(state), weights, client_data))
      new_state = tff.federated_map(advance, state)
    else:
      output = tff.federated_map(
          client_update,
          (tff.federated_broadcast(state[ROUND_KEY]), weights, client_data))
      result = output[0]
      new_state = tff.federated_map(
          advance, (state, tff.federated_sum(output[1])))
    return tff.templates.MeasuredProcessOutput(
        new_state, result, tff.federated_value((), tff.SERVER))

  return tff.learning.templates.ClientWorkProcess(init_fn, next_fn)
