"""A contribution whose norm is not finite adds exactly zero and counts as
clipped: FedHDP's clients and cohort rows, DP-SGD's examples (per layer and by
the jacobian) and the processes built on them."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.privacy import plans
from tff_hdp.simulation import cross_silo_setting as cse
from tff_hdp.learning import cross_silo_process
from tff_hdp.learning import dp_sgd
from tff_hdp.learning import noise_aware
from tff_hdp.aggregators import clipping
from tff_hdp.aggregators import CohortHeterogeneousDPFactory
from tff_hdp.aggregators import HeterogeneousDPFactory
from tests.aggregators import test_heterogeneous_dp
from tests.learning import test_dp_sgd
from tests.learning import test_noise_aware
from tests.simulation import test_cross_silo_setting

pytestmark = pytest.mark.tf

SHAPES = collections.OrderedDict(w=[2, 3], b=[3])
CLIP = 1.0


def _bad_update(kind):
  """Finite entries whose squares overflow, or one NaN or inf entry."""
  value = collections.OrderedDict(
      (k, np.full(s, 1e30 if kind == 'overflow' else 0.1, np.float32))
      for k, s in SHAPES.items())
  if kind != 'overflow':
    value['w'][1, 2] = np.nan if kind == 'nan' else -np.inf
  return value


def _round():
  """Updates, group rows and which are bad: 4 normal clients (2 clipped), an
  overflowing, a NaN and an inf one, and a NaN one of weight zero (dropped)."""
  rng = np.random.default_rng(0)
  normal = [collections.OrderedDict(
      (k, (scale * rng.normal(size=s)).astype(np.float32))
      for k, s in SHAPES.items()) for scale in (0.1, 0.2, 2.0, 3.0)]
  values = [normal[0], _bad_update('overflow'), normal[1], _bad_update('nan'),
            normal[2], _bad_update('inf'), normal[3], _bad_update('nan')]
  groups = [0, 0, 1, 1, 0, 1, 1, None]
  weights = [test_heterogeneous_dp._one_hot(g) if g is not None else
             np.zeros(2, np.float32) for g in groups]
  return values, weights, np.array([False, True] * 4)


def _process(cohort, noise_multipliers):
  factory = (CohortHeterogeneousDPFactory if cohort else
             HeterogeneousDPFactory)(noise_multipliers, [1.0, 0.5],
                                     [None, None], initial_clip_norm=CLIP,
                                     clip_learning_rate=0.0,
                                     release_unprotected_counts=True)
  rows = [None] if cohort else []
  return factory.create(
      collections.OrderedDict((k, tff.TensorType(np.float32, rows + s))
                              for k, s in SHAPES.items()),
      tff.TensorType(np.float32, rows + [2]))


def _next(process, state, cohort, values, weights):
  if cohort:  # All clients in one cohort, one row each.
    values = [tf.nest.map_structure(lambda *x: np.stack(x), *values)]
    weights = [np.stack(weights)]
  return process.next(state, values, weights)


@pytest.mark.parametrize('noise', [[0.0, 0.0], [0.5, 2.0]])
@pytest.mark.parametrize('cohort', [False, True])
def test_aggregator_adds_zero_for_a_non_finite_norm(cohort, noise):
  process = _process(cohort, noise)
  state = process.initialize()
  values, weights, bad = _round()
  out = _next(process, state, cohort, values, weights)
  # The same round with zero updates in the bad slots (same state: same noise).
  zeroed = [tf.nest.map_structure(np.zeros_like, v) if b else v
            for v, b in zip(values, bad)]
  reference = _next(process, state, cohort, zeroed, weights)
  for k in SHAPES:
    assert np.all(np.isfinite(out.result[k]))
    np.testing.assert_array_equal(out.result[k], reference.result[k])
  m = out.measurements
  np.testing.assert_array_equal(m['group_client_counts'], [3.0, 4.0])
  flat = [np.concatenate([np.ravel(v[k]) for k in SHAPES]) for v in values]
  normal_clipped = sum(np.linalg.norm(f) > CLIP
                       for f, b in zip(flat, bad) if not b)
  assert normal_clipped == 2
  # The 3 counted bad clients are clipped (b = 0); the dropped one is not
  # counted.
  assert float(m['fraction_clipped_estimate']) == pytest.approx(
      (normal_clipped + 3) / 7, rel=1e-6)
  if not any(noise):
    # Group sums of the clipped normal updates over the realized counts.
    counts = np.array([3.0, 4.0])
    sums = np.zeros((2, flat[0].size))
    for f, w, b in zip(flat, weights, bad):
      if not b:
        sums += np.outer(w, test_heterogeneous_dp._clip(f, CLIP))
    group_weights = np.array([1.0, 0.5]) * counts
    expected = (group_weights / group_weights.sum()) @ (sums / counts[:, None])
    got = np.concatenate([np.ravel(out.result[k]) for k in SHAPES])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def _bad_gradients():
  """Per-example gradients of 7 examples; 1, 3 and 5 are NaN, inf and too
  large for their squares."""
  rng = np.random.default_rng(1)
  scales = np.array([0.2, 1.0, 3.0, 1.0, 0.5, 1.0, 2.0], np.float32)
  grads = [(rng.normal(size=(7, 3)) * scales[:, None]).astype(np.float32),
           (rng.normal(size=(7, 2, 2)) *
            scales[:, None, None]).astype(np.float32)]
  grads[0][1, 2] = np.nan
  grads[1][3, 0, 1] = np.inf
  grads[0][5] = 1e30
  grads[1][5] = -1e30
  return grads, np.array([1, 3, 5])


@pytest.mark.parametrize('kind', ['nan', 'inf', 'overflow'])
def test_zero_unless_gives_exact_zeros_for_a_dropped_structure(kind):
  """A dropped update is zeros of its shapes, not its entries times 0 (NaN
  times 0 is NaN); a kept one is itself."""
  value = _bad_update(kind)
  dropped = clipping.zero_unless(tf.constant(False), value)
  kept = clipping.zero_unless(tf.constant(True), value)
  for k, shape in SHAPES.items():
    assert dropped[k].shape == shape
    np.testing.assert_array_equal(dropped[k].numpy(), np.zeros(shape))
    np.testing.assert_array_equal(kept[k].numpy(), value[k])


def test_clipped_sum_drops_an_example_with_a_non_finite_norm():
  grads, bad = _bad_gradients()
  normal = np.setdiff1d(np.arange(7), bad)
  tensors = [tf.constant(g) for g in grads]
  clipped = [t.numpy() for t in dp_sgd.clipped_sum(tensors, CLIP)]
  flat = np.concatenate([g.reshape(7, -1) for g in grads], axis=1)
  expected = sum(test_heterogeneous_dp._clip(flat[i], CLIP) for i in normal)
  # A float32 sum of four terms of norm <= CLIP is good to about eps * CLIP
  # in every coordinate, however small the coordinate comes out (one here is
  # 1.5e-4 after cancellation), and TF's order of summation follows the
  # CPU's vector width: an absolute tolerance, not only a relative one.
  np.testing.assert_allclose(
      np.concatenate([c.ravel() for c in clipped]), expected, rtol=1e-6,
      atol=1e-6 * CLIP)
  for i in range(7):
    one = dp_sgd.clipped_sum([t[i:i + 1] for t in tensors], CLIP)
    norm = tf.linalg.global_norm(one).numpy()
    assert norm <= CLIP * (1 + 1e-6)
    assert (norm == 0) == (i in bad)


def _dense_model():
  """Only Dense layers: every variable goes per layer."""
  tf.keras.utils.set_random_seed(4)
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(5,)),
      tf.keras.layers.Dense(4),
      tf.keras.layers.Dense(3),
  ])


def _shared_layer_model():
  """A layer called twice: its reads are not one op's, so its variables take
  the jacobian (the head still goes per layer)."""
  tf.keras.utils.set_random_seed(4)
  inputs = tf.keras.Input((5,))
  shared = tf.keras.layers.Dense(5)
  return tf.keras.Model(inputs,
                        tf.keras.layers.Dense(3)(shared(shared(inputs))))


def _per_layer_flags(loss_fn, inputs, variables):
  """Which of `variables` `clipped_gradient_sum` takes per layer."""
  flags = []

  @tf.function
  def trace():
    loss_fn(inputs)
    graph = tf.compat.v1.get_default_graph()
    flags.extend(dp_sgd._per_layer_op(v, graph) is not None
                 for v in variables)

  trace()
  return flags


def _poisoned_batch(kinds):
  """8 examples; 1, 4 and 6 get a NaN pixel, an inf one and 1e30 everywhere
  (finite activations whose squares overflow), as `kinds` says."""
  x, y = test_dp_sgd._data(8, seed=2)
  values = dict(nan=(1, 3, np.nan), inf=(4, 0, np.inf),
                overflow=(6, slice(None), 1e30))
  for kind in kinds:
    row, col, value = values[kind]
    x[row, col] = value
  normal = np.setdiff1d(np.arange(8), [values[k][0] for k in kinds])
  return x, y, normal


def _check_clipped_gradient_sum(model, per_layer, kinds):
  """Runs `clipped_gradient_sum` in a tf.function on a poisoned batch: a
  finite sum, equal to the normal examples' alone, and each example's own
  contribution within the clip (zero if poisoned)."""
  variables = model.trainable_variables
  x, y, normal = _poisoned_batch(kinds)
  loss_fn = lambda batch: test_dp_sgd._per_example_ce(batch[1],
                                                      model(batch[0]))
  assert _per_layer_flags(loss_fn, (x, y), variables) == per_layer
  fast = tf.function(lambda x, y: dp_sgd.clipped_gradient_sum(
      loss_fn, (x, y), variables, CLIP))
  summed = fast(x, y)
  assert all(np.all(np.isfinite(s.numpy())) for s in summed)
  assert tf.linalg.global_norm(summed).numpy() <= CLIP * len(normal)
  expected = dp_sgd.clipped_sum(dp_sgd.per_example_gradients(
      loss_fn, (x[normal], y[normal]), variables), CLIP)
  for s, e in zip(summed, expected):
    np.testing.assert_allclose(s.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
  for i in range(8):
    norm = tf.linalg.global_norm(fast(x[i:i + 1], y[i:i + 1])).numpy()
    assert norm <= CLIP * (1 + 1e-5)
    assert (norm == 0) == (i not in normal)


def test_per_layer_clipped_gradient_sum_drops_non_finite_examples():
  _check_clipped_gradient_sum(_dense_model(), [True] * 4,
                              ['nan', 'inf', 'overflow'])


def test_jacobian_clipped_gradient_sum_drops_non_finite_examples():
  model = _shared_layer_model()
  flags = [False, False, True, True]
  # A batch jacobian would carry a NaN or inf activation into every
  # example's row (0 * NaN in the weight gradient's sum over rows): each
  # example's gradient must come from its own pass.
  _check_clipped_gradient_sum(model, flags, ['nan', 'inf', 'overflow'])


def _dilated_cnn():
  tf.keras.utils.set_random_seed(5)
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(9, 8, 2)),
      tf.keras.layers.Conv2D(3, 3, dilation_rate=2, padding='same',
                             activation='relu'),
      tf.keras.layers.Conv2D(2, 2, dilation_rate=(2, 3), activation='tanh'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(3),
  ])


def test_keras_dilated_conv_falls_back_to_the_jacobian():
  # Keras runs a dilated conv as Conv2D on SpaceToBatchND blocks, whose rows
  # are not examples.
  model = _dilated_cnn()
  variables = model.trainable_variables
  rng = np.random.default_rng(6)
  x = rng.normal(size=(5, 9, 8, 2)).astype(np.float32)
  y = rng.integers(0, 3, 5).astype(np.int32)
  loss_fn = lambda batch: test_dp_sgd._per_example_ce(
      batch[1], model(batch[0], training=True))
  # Conv kernels, conv biases (after BatchToSpaceND), Dense kernel and bias.
  assert _per_layer_flags(loss_fn, (x, y), variables) == (
      [False, True] * 2 + [True] * 2)
  test_dp_sgd.check_clipped_sum_equals_per_example(loss_fn, (x, y), variables,
                                                   5.0)


@pytest.mark.parametrize('padding', ['SAME', 'VALID'])
def test_dilated_conv2d_op_stays_per_layer_and_exact(padding):
  # A Conv2D op's own dilations are in its patches. CPU has no gradient for
  # it: the reference is an undilated conv with the kernel spread out by
  # zeros.
  rng = np.random.default_rng(7)
  x = tf.constant(rng.normal(size=(4, 11, 10, 2)), tf.float32)
  kernel = tf.Variable(rng.normal(size=(3, 2, 2, 3)).astype(np.float32))
  spread = np.zeros((5, 4, 2, 3), np.float32)
  spread[::2, ::3] = kernel.numpy()
  spread = tf.Variable(spread)

  def dilated_loss(batch):
    return tf.reduce_sum(tf.sin(tf.nn.conv2d(batch, kernel, 1, padding,
                                             dilations=[2, 3])), [1, 2, 3])

  assert _per_layer_flags(dilated_loss, x, [kernel]) == [True]
  fast = tf.function(lambda: dp_sgd.clipped_gradient_sum(
      dilated_loss, x, [kernel], 2.0))()[0]
  reference = dp_sgd.per_example_gradients(
      lambda batch: tf.reduce_sum(tf.sin(tf.nn.conv2d(batch, spread, 1,
                                                      padding)), [1, 2, 3]),
      x, [spread])[0][:, ::2, ::3]
  np.testing.assert_allclose(fast.numpy(),
                             dp_sgd.clipped_sum([reference], 2.0)[0].numpy(),
                             rtol=1e-5, atol=1e-6)


def test_local_dp_sgd_update_ignores_a_nan_pixel():
  model = test_dp_sgd._softmax_model_fn()()
  train = dp_sgd.build_local_dp_sgd(model, test_dp_sgd._per_example_ce,
                                    learning_rate=0.5, clip_norm=0.3)
  initial = tf.nest.map_structure(
      lambda v: tf.constant(v.numpy()),
      tff.learning.models.ModelWeights.from_model(model))
  x, y = test_dp_sgd._data(6)
  poisoned = x.copy()
  poisoned[2, 4] = np.nan

  def update(x, y):
    # Rate 1, no noise: one step on all examples, divided by their number.
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    return train(initial, data, 0.0, 1.0, 1, tf.constant([0, 0], tf.int64))[0]

  keep = np.arange(6) != 2
  for u, c in zip(update(poisoned, y), update(x[keep], y[keep])):
    assert np.all(np.isfinite(u.numpy()))
    # The two sums add the same float32 terms in other batches (entries
    # near 0.05): a few ulps apart, never 1e-6.
    np.testing.assert_allclose(u.numpy() * 6, c.numpy() * 5, rtol=1e-5,
                               atol=1e-6)


def _full_batch_plan(num_examples):
  """Rate 1: every example, the NaN one too, is in every step."""
  return plans.plan_client_privacy(4.0, 1e-4, num_examples, num_examples,
                                    rounds=1)


def test_cross_silo_silo_with_a_nan_pixel_trains_on_its_other_examples():
  task = test_cross_silo_setting._clustered_task(num_silos=3, examples=40)
  x, y = task.client_train['silo0']
  x = x.copy()
  x[3, 1] = np.nan
  task.client_train['silo0'] = (x, y)
  process = cse.build_process(task, cse.algorithm_record('mrmtl'),
                              test_cross_silo_setting._settings())
  state = process.initialize()
  initial = cross_silo_process.cluster_weights(state, 0).trainable
  data = [cross_silo_process.make_client_data(
      tf.data.Dataset.from_tensor_slices(task.client_train[c]).batch(20),
      _full_batch_plan(40), 40.0, i,
      cross_silo_process.make_role(0.2, 0.5, False, 0.0, 0, 1))
          for i, c in enumerate(task.client_ids)]
  state, outputs, measurements = process.next(state, [initial] * 3, data)
  assert int(measurements['num_non_finite_updates']) == 0
  for o in outputs:
    assert all(np.all(np.isfinite(w)) for w in o['personal'])
    assert not np.allclose(o['personal'][0], initial[0])
  final = cross_silo_process.cluster_weights(state, 0).trainable
  assert all(np.all(np.isfinite(w)) for w in final)
  assert not np.allclose(final[0], initial[0])


def test_untrusted_server_round_survives_a_nan_example():
  # Before, the NaN update made TFF's finalizer reject the whole aggregate.
  process = noise_aware.build_noise_aware_fedavg(
      test_noise_aware._model_fn(),
      test_noise_aware._loss,
      noise_aware.build_aggregator('dpfedavg'), learning_rate=0.1,
      clip_norm=1.0)
  rng = np.random.default_rng(8)
  clients = []
  for i in range(3):
    x = rng.normal(size=(20, 4)).astype(np.float32)
    if i == 1:
      x[5, 2] = np.nan
    clients.append(dp_sgd.make_client_data(
        tf.data.Dataset.from_tensor_slices(
            (x, (x[:, 0] > 0).astype(np.int32))).batch(8),
        _full_batch_plan(20), 20.0, seed=i))
  state = process.initialize()
  out = process.next(state, clients)
  before = process.get_model_weights(state).trainable
  after = process.get_model_weights(out.state).trainable
  assert all(np.all(np.isfinite(w)) for w in after)
  assert not np.allclose(before[0], after[0])
