"""DP-SGD: exact clipping, vectorized gradients, sampling, noise, accounting."""

import collections

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from dp_accounting import rdp

from tff_hdp.privacy import plans
from tff_hdp.learning import dp_sgd

pytestmark = pytest.mark.tf


def _softmax_model_fn():
  spec = (tf.TensorSpec([None, 5], tf.float32), tf.TensorSpec([None], tf.int32))

  def model_fn():
    keras_model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(5,)),
        tf.keras.layers.Dense(3, kernel_initializer='glorot_uniform'),
    ])
    return tff.learning.models.from_keras_model(
        keras_model, loss=tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True), input_spec=spec)

  return model_fn


def _per_example_ce(y, logits):
  return tf.keras.losses.sparse_categorical_crossentropy(y, logits,
                                                         from_logits=True)


def _data(n, seed=0):
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(n, 5)).astype(np.float32),
          rng.integers(0, 3, n).astype(np.int32))


def test_clipping_is_exact_for_known_per_example_gradients():
  # loss_j = <w, x_j> has gradient x_j exactly.
  x = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [-6.0, 8.0]], np.float32)
  w = tf.Variable(tf.zeros([2]))
  grads = dp_sgd.per_example_gradients(
      lambda batch: tf.linalg.matvec(batch, w), tf.constant(x), [w])
  np.testing.assert_allclose(grads[0].numpy(), x)
  clipped = dp_sgd.clipped_sum(grads, 1.0)[0].numpy()
  norms = np.linalg.norm(x, axis=1)
  expected = (x * (1.0 / np.maximum(norms, 1.0))[:, None]).sum(0)
  np.testing.assert_allclose(clipped, expected, rtol=1e-6)
  np.testing.assert_allclose(clipped, [0.6 + 0.3 - 0.6, 0.8 + 0.4 + 0.8],
                             rtol=1e-6)


def test_clip_norm_is_over_all_variables_jointly():
  a, b = tf.Variable(tf.zeros([1])), tf.Variable(tf.zeros([1]))
  x = tf.constant([[3.0, 4.0]])
  grads = dp_sgd.per_example_gradients(
      lambda batch: batch[:, 0] * a[0] + batch[:, 1] * b[0], x, [a, b])
  clipped = dp_sgd.clipped_sum(grads, 1.0)
  np.testing.assert_allclose([clipped[0].numpy()[0], clipped[1].numpy()[0]],
                             [0.6, 0.8], rtol=1e-6)


def test_vectorized_gradients_equal_a_per_example_loop():
  tf.keras.utils.set_random_seed(1)
  model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(5,)),
      tf.keras.layers.Dense(4, activation='tanh'),
      tf.keras.layers.Dense(3),
  ])
  x, y = _data(7)
  variables = model.trainable_variables
  vectorized = dp_sgd.per_example_gradients(
      lambda batch: _per_example_ce(batch[1], model(batch[0])), (x, y),
      variables)
  for j in range(len(x)):
    with tf.GradientTape() as tape:
      loss = _per_example_ce(y[j:j + 1], model(x[j:j + 1]))[0]
    reference = tape.gradient(loss, variables)
    for v, r in zip(vectorized, reference):
      np.testing.assert_allclose(v[j].numpy(), r.numpy(), rtol=1e-5,
                                 atol=1e-6)


def test_per_layer_clipped_sum_equals_the_jacobian_path_on_a_cnn():
  # Convs ('same', strided, 'valid'), pooling, Dense, and a LayerNorm whose
  # variables the per-layer path does not handle (they take the jacobian).
  tf.keras.utils.set_random_seed(2)
  model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(8, 8, 2)),
      tf.keras.layers.Conv2D(3, 3, padding='same', activation='relu'),
      tf.keras.layers.Conv2D(4, 3, strides=2, padding='same'),
      tf.keras.layers.MaxPool2D(2),
      tf.keras.layers.Conv2D(2, 2, activation='tanh'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.LayerNormalization(),
      tf.keras.layers.Dense(5, activation='relu'),
      tf.keras.layers.Dense(3),
  ])
  rng = np.random.default_rng(3)
  x = rng.normal(size=(6, 8, 8, 2)).astype(np.float32)
  y = rng.integers(0, 3, 6).astype(np.int32)
  variables = model.trainable_variables
  loss_fn = lambda batch: _per_example_ce(batch[1],
                                          model(batch[0], training=True))
  handled = []

  @tf.function
  def which_are_per_layer():
    loss_fn((x, y))
    graph = tf.compat.v1.get_default_graph()
    handled.extend(dp_sgd._per_layer_op(v, graph) is not None
                   for v in variables)

  which_are_per_layer()
  assert handled == ['layer_normalization' not in v.name for v in variables]
  check_clipped_sum_equals_per_example(loss_fn, (x, y), variables, 1.5)


def check_clipped_sum_equals_per_example(loss_fn, inputs, variables, clip):
  """`clipped_gradient_sum` in a tf.function equals `clipped_sum` of the
  per-example gradients, on a batch where some examples are clipped and
  some are not."""
  per_example = dp_sgd.per_example_gradients(loss_fn, inputs, variables)
  batch = len(tf.nest.flatten(inputs)[0])
  norms = np.sqrt(sum(np.sum(np.reshape(g, [batch, -1])**2, 1)
                      for g in per_example))
  assert np.any(norms < clip) and np.any(norms > clip)
  fast = tf.function(
      lambda: dp_sgd.clipped_gradient_sum(loss_fn, inputs, variables, clip))()
  for f, r in zip(fast, dp_sgd.clipped_sum(per_example, clip)):
    np.testing.assert_allclose(f.numpy(), r.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize('in_graph', [True, False])
def test_a_shift_joins_every_examples_gradient_before_clipping(in_graph):
  # Convs, Dense and a LayerNorm: per-layer (in a graph) and jacobian paths.
  tf.keras.utils.set_random_seed(4)
  model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(6, 6, 1)),
      tf.keras.layers.Conv2D(2, 3, padding='same', activation='relu'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.LayerNormalization(),
      tf.keras.layers.Dense(3),
  ])
  rng = np.random.default_rng(5)
  x = rng.normal(size=(7, 6, 6, 1)).astype(np.float32)
  y = rng.integers(0, 3, 7).astype(np.int32)
  variables = model.trainable_variables
  shift = [tf.constant(rng.normal(scale=0.3, size=v.shape), tf.float32)
           for v in variables]
  loss_fn = lambda batch: _per_example_ce(batch[1],
                                          model(batch[0], training=True))
  # Independent: materialize each example's gradient plus the shift, clip
  # it to the joint norm, and sum.
  per_example = dp_sgd.per_example_gradients(loss_fn, (x, y), variables)
  shifted = [g + t[tf.newaxis] for g, t in zip(per_example, shift)]
  norms = np.sqrt(sum(np.sum(np.reshape(g, [7, -1])**2, 1) for g in shifted))
  clip = float(np.median(norms))
  assert np.any(norms < clip) and np.any(norms > clip)
  scale = clip / np.maximum(norms, clip)
  expected = [np.tensordot(scale, g.numpy(), axes=1) for g in shifted]
  call = lambda: dp_sgd.clipped_gradient_sum(loss_fn, (x, y), variables, clip,
                                             shift)
  got = tf.function(call)() if in_graph else call()
  for g, e in zip(got, expected):
    np.testing.assert_allclose(g.numpy(), e, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize('in_graph', [True, False])
@pytest.mark.parametrize('size', [1e3, 1e4, 1e5, 1e6])
def test_a_gradient_nearly_cancelling_the_shift_is_still_clipped(in_graph,
                                                                   size):
  """An example whose gradient (of norm ~`size` c) nearly cancels the
  shift: the norm of what it adds, in float64, is at most c (1 + 1e-6), and
  it is the example's shifted gradient scaled to the clip (expanded float32
  norms collapsed here, letting such an example add up to 100 c)."""
  tf.keras.utils.set_random_seed(7)
  model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(5,)),
      tf.keras.layers.Dense(4),
      tf.keras.layers.Dense(3)])
  rng = np.random.default_rng(int(size))
  variables = model.trainable_variables
  # A loss linear in the outputs: gradients grow with the input, unsaturated.
  v = tf.constant(rng.normal(size=(3,)), tf.float32)
  loss_fn = lambda batch: tf.linalg.matvec(model(batch[0], training=True), v)
  clip = 1.0
  for trial in range(4):
    x = (rng.normal(size=(1, 5)) * size).astype(np.float32)
    y = rng.integers(0, 3, 1).astype(np.int32)
    g = [t[0].numpy().astype(np.float64) for t in
         dp_sgd.per_example_gradients(loss_fn, (x, y), variables)]
    assert np.sqrt(sum(np.sum(t**2) for t in g)) > 0.1 * size * clip
    # shift = -g + u, u of norm 0.5 c, 2 c (clipped) or 0.01 c.
    target = (0.5, 2.0, 0.01, 2.0)[trial] * clip
    u = [rng.normal(size=t.shape) for t in g]
    u_norm = np.sqrt(sum(np.sum(t**2) for t in u))
    shift = [tf.constant(-t + w * target / u_norm, tf.float32)
             for t, w in zip(g, u)]
    # The example's true shifted gradient, from the float32 values used.
    true = [t + s.numpy().astype(np.float64) for t, s in zip(g, shift)]
    norm = np.sqrt(sum(np.sum(t**2) for t in true))
    call = lambda: dp_sgd.clipped_gradient_sum(loss_fn, (x, y), variables,
                                               clip, shift)
    got = [t.numpy().astype(np.float64) for t in
           (tf.function(call)() if in_graph else call())]
    added = np.sqrt(sum(np.sum(t**2) for t in got))
    assert added <= clip * (1 + 1e-6), (size, trial, added, norm)
    # Equal to the clipped shifted gradient up to float32's resolution of a
    # gradient of this size (the per-layer path forms a_i g_i^T itself).
    scale = clip / max(norm, clip)
    for t, e in zip(got, true):
      np.testing.assert_allclose(t, scale * e, rtol=1e-4,
                                 atol=1e-6 * size * clip)


def test_the_regularizer_placement_decides_where_the_pull_goes():
  model = _softmax_model_fn()()
  x, y = _data(40)
  anchor = [tf.ones_like(v) for v in model.trainable_variables]
  updates = {}
  for placement in dp_sgd.REGULARIZER_PLACEMENTS:
    train = dp_sgd.build_local_dp_sgd(model, _per_example_ce, 0.5, 0.1,
                                      placement)
    initial = tff.learning.models.ModelWeights.from_model(model)
    initial = tf.nest.map_structure(lambda v: tf.identity(v), initial)
    # Rate 1: every example in the step, the expected batch exactly.
    update, _ = train(initial, (x, y), tf.constant(0.0), tf.constant(1.0),
                      tf.constant(1), tf.constant([1, 2], tf.int64),
                      tf.constant(2.0), initial.trainable.__class__(anchor))
    updates[placement] = update
    tf.nest.map_structure(lambda v, t: v.assign(t), model.trainable_variables,
                          list(initial.trainable))
  # A pull of norm ~2 (lambda 2, |w - 1| ~ 1) against a clip of 0.1: clipped
  # with the examples it is small, after the noise it is not.
  inside = np.sqrt(sum(np.sum(np.square(u)) for u in updates['per_example']))
  after = np.sqrt(sum(np.sum(np.square(u)) for u in updates['after_noise']))
  assert inside <= 0.5 * 0.1 * 1.0001  # lr * clip: every step's mean is <= c
  assert after > 10 * inside
  with pytest.raises(ValueError, match='regularizer placement must be one'):
    dp_sgd.build_local_dp_sgd(model, _per_example_ce, 0.5, 0.1, 'inside')


def test_noisy_gradient_is_clipped_mean_plus_returned_noise():
  w = tf.Variable(tf.zeros([4000]))
  x = tf.constant(np.random.default_rng(0).normal(size=(3, 4000)),
                  tf.float32)
  loss_fn = lambda batch: tf.linalg.matvec(batch, w)
  seed = tf.constant([1, 2], tf.int64)
  clean = dp_sgd.clipped_sum(dp_sgd.per_example_gradients(loss_fn, x, [w]),
                             2.0)[0] / 5.0
  noisy, noise = dp_sgd.private_mean_gradient(loss_fn, x, [w], tf.constant(3),
                                              2.0, 1.5, 5.0, seed)
  np.testing.assert_allclose(noisy[0] - noise[0], clean, atol=1e-5)
  assert np.std(noise[0].numpy()) == pytest.approx(1.5 * 2.0 / 5.0, rel=0.05)
  noiseless, _ = dp_sgd.private_mean_gradient(loss_fn, x, [w],
                                              tf.constant(3), 2.0, 0.0, 5.0,
                                              seed)
  np.testing.assert_allclose(noiseless[0], clean, atol=1e-6)


def test_empty_batch_gives_noise_only():
  w = tf.Variable(tf.zeros([3]))
  noisy, noise = dp_sgd.private_mean_gradient(
      lambda batch: tf.zeros([0]), tf.zeros([0, 3]), [w], tf.constant(0),
      1.0, 2.0, 4.0, tf.constant([0, 0], tf.int64))
  np.testing.assert_array_equal(noisy[0], noise[0])
  assert np.all(noise[0].numpy() != 0)


def test_poisson_sampling_includes_each_example_independently_at_rate_q():
  n, q, trials = 50, 0.2, 400
  counts = np.zeros(n)
  for t in range(trials):
    idx = dp_sgd.poisson_sample(n, q, tf.constant([7, t], tf.int64)).numpy()
    counts[idx] += 1
  rate = counts / trials
  assert np.all(np.abs(rate - q) < 5 * np.sqrt(q * (1 - q) / trials))
  assert counts.sum() / trials == pytest.approx(q * n, rel=0.05)


def test_reported_epsilon_equals_dp_accounting_computed_directly():
  privacy = plans.plan_client_privacy(epsilon=2.0, delta=1e-5,
                                       num_examples=100, batch_size=16,
                                       rounds=10)
  assert privacy.sampling_rate == float(np.float32(0.16))
  assert privacy.steps_per_round == 6  # floor(100 / 16)
  accountant = rdp.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
  accountant.compose(
      dp_accounting.SelfComposedDpEvent(
          dp_accounting.PoissonSampledDpEvent(
              privacy.sampling_rate,
              dp_accounting.GaussianDpEvent(privacy.noise_multiplier)), 60))
  direct = accountant.get_epsilon(1e-5)
  assert privacy.epsilon_after(10) == pytest.approx(direct, rel=1e-12)
  assert 0.99 * 2.0 <= direct <= 2.0 * (1 + 1e-6)


def test_plan_refuses_a_batch_larger_than_the_data():
  with pytest.raises(ValueError, match='batch size'):
    plans.plan_client_privacy(1.0, 1e-5, num_examples=10, batch_size=16,
                               rounds=1)


def test_one_full_batch_step_without_noise_matches_a_manual_loop():
  model = _softmax_model_fn()()
  train = dp_sgd.build_local_dp_sgd(model, _per_example_ce, learning_rate=0.5,
                                    clip_norm=0.3)
  initial = tff.learning.models.ModelWeights.from_model(model)
  initial = tf.nest.map_structure(lambda v: tf.constant(v.numpy()), initial)
  x, y = _data(6)
  data = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
  # Rate 1: every example is in the one step; noise multiplier 0.
  update, noise = train(initial, data, 0.0, 1.0, 1,
                        tf.constant([0, 0], tf.int64))
  kernel, bias = [t.numpy() for t in initial.trainable]
  expected = [np.zeros_like(kernel), np.zeros_like(bias)]
  for j in range(6):
    logits = x[j] @ kernel + bias
    p = np.exp(logits - logits.max())
    p /= p.sum()
    p[y[j]] -= 1.0
    g = [np.outer(x[j], p), p]
    norm = np.sqrt(sum((t**2).sum() for t in g))
    for e, t in zip(expected, g):
      e += t * 0.3 / max(norm, 0.3)
  for u, e in zip(update, expected):
    np.testing.assert_allclose(u.numpy(), 0.5 * e / 6.0, rtol=1e-4,
                               atol=1e-6)
  assert all(np.all(n.numpy() == 0) for n in noise)


def test_update_noise_has_the_planned_variance():
  model = _softmax_model_fn()()
  train = dp_sgd.build_local_dp_sgd(model, _per_example_ce, learning_rate=0.1,
                                    clip_norm=1.0)
  initial = tf.nest.map_structure(
      lambda v: tf.constant(v.numpy()),
      tff.learning.models.ModelWeights.from_model(model))
  x, y = _data(64)
  privacy = plans.plan_client_privacy(1.0, 1e-5, 64, 16, rounds=3)
  p = 5 * 3 + 3
  draws = []
  for s in range(40):
    _, noise = train(initial,
                     tf.data.Dataset.from_tensor_slices((x, y)).batch(8),
                     privacy.noise_multiplier, privacy.sampling_rate,
                     privacy.steps_per_round, tf.constant([s, 0], tf.int64))
    draws.append(np.concatenate([n.numpy().ravel() for n in noise]))
  measured = np.mean(np.square(draws)) * p
  expected = privacy.update_noise_variance(0.1, 1.0, p)
  assert measured == pytest.approx(expected, rel=0.1)


def test_client_work_takes_privacy_from_client_data_and_reports_no_metrics():
  model_fn = _softmax_model_fn()
  work = dp_sgd.build_dp_sgd_client_work(model_fn, _per_example_ce, 0.1, 1.0)
  data_type = work.next.type_signature.parameter[2].member
  privacy_type = data_type[dp_sgd.PRIVACY_KEY].element
  assert set(tff.structure.name_list(privacy_type)) == {
      'noise_multiplier', 'sampling_rate', 'steps', 'weight', 'seed'}
  privacy = plans.plan_client_privacy(4.0, 1e-5, 40, 16, rounds=2)
  x, y = _data(40)
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(10)
  clients = [dp_sgd.make_client_data(dataset, privacy, 3.0, seed=s)
             for s in (0, 1, 0)]
  weights = tff.learning.models.ModelWeights.from_model(model_fn())
  weights = tf.nest.map_structure(lambda v: v.numpy(), weights)
  state = work.initialize()
  out = work.next(state, [weights] * 3, clients)
  assert out.measurements == ()
  updates = [
      np.concatenate([np.ravel(u) for u in r.update]) for r in out.result
  ]
  assert [r.update_weight for r in out.result] == [3.0, 3.0, 3.0]
  np.testing.assert_array_equal(updates[0], updates[2])
  assert not np.allclose(updates[0], updates[1])
  later = work.next(out.state, [weights], clients[:1]).result[0]
  assert not np.allclose(
      np.concatenate([np.ravel(u) for u in later.update]), updates[0])


def test_client_data_round_trips_its_privacy_element():
  privacy = plans.plan_client_privacy(1.0, 1e-5, 40, 8, rounds=1)
  data = dp_sgd.make_client_data(tf.data.Dataset.range(1), privacy, 2.0, 9)
  own = data[dp_sgd.PRIVACY_KEY].get_single_element()
  assert isinstance(data, collections.OrderedDict)
  assert own['steps'].numpy() == 5 and own['seed'].numpy() == 9
  assert own['sampling_rate'].numpy() == np.float32(0.2)
