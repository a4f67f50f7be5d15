"""Canary directions, updates and scores, and canary examples in DP-SGD,
against explicit linear algebra."""

import numpy as np
import pytest
import scipy.linalg
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.learning import canaries
from tff_hdp.learning import dp_sgd
from tff_hdp.privacy import plans

pytestmark = pytest.mark.tf


def test_fast_walsh_hadamard_is_the_sylvester_matrix():
  x = np.random.default_rng(0).normal(size=64).astype(np.float32)
  np.testing.assert_allclose(
      canaries.fast_walsh_hadamard(tf.constant(x)).numpy(),
      scipy.linalg.hadamard(64) @ x, atol=1e-4)


def _explicit(directions):
  """Every direction built entry by entry: s_i (-1)^popcount(r & i) / sqrt(d)."""
  s = directions.signs().numpy()
  i = np.arange(directions.num_params)
  return np.stack([
      s * (1 - 2 * (np.vectorize(lambda k, r=r: bin(r & k).count('1'))(i) % 2))
      for r in directions.hadamard_rows()
  ]) / np.sqrt(directions.num_params)


def test_directions_are_unit_sign_vectors_and_scores_are_their_cosines():
  directions = canaries.CanaryDirections(seed=3, num_params=300, count=40)
  rows = directions.hadamard_rows()
  assert len(set(rows)) == 40 and rows.min() >= 0 and rows.max() < 512
  explicit = _explicit(directions)
  np.testing.assert_allclose(np.linalg.norm(explicit, axis=1), 1, rtol=1e-6)
  np.testing.assert_allclose(np.abs(explicit), 300**-0.5, rtol=1e-6)
  for c in (0, 17, 39):
    np.testing.assert_allclose(directions.direction(rows[c]).numpy(),
                               explicit[c], atol=1e-7)
  delta = [tf.random.stateless_normal([20, 10], [1, 2]),
           tf.random.stateless_normal([100], [3, 4])]
  flat = np.concatenate([t.numpy().ravel() for t in delta])
  np.testing.assert_allclose(directions.cosines(delta).numpy(),
                             explicit @ flat / np.linalg.norm(flat),
                             atol=1e-6)
  assert np.all(directions.cosines([tf.zeros([300])]).numpy() == 0)


def test_a_canary_update_moves_the_model_along_its_direction():
  directions = canaries.CanaryDirections(seed=3, num_params=300, count=40)
  like = [tf.zeros([20, 10]), tf.zeros([100])]
  row = directions.hadamard_rows()[5]
  update = directions.update(row, like)
  assert [u.shape for u in update] == [[20, 10], [100]]
  flat = np.concatenate([u.numpy().ravel() for u in update])
  # A pseudo-gradient: the server subtracts it.
  np.testing.assert_allclose(-flat / canaries.CANARY_NORM,
                             _explicit(directions)[5], atol=1e-6)
  real = [tf.ones([20, 10]), tf.ones([100])]
  kept = canaries.replace_if_canary(directions, tf.constant(-1), real)
  np.testing.assert_array_equal(kept[1].numpy(), np.ones(100))
  replaced = canaries.replace_if_canary(directions, tf.constant(row), real)
  np.testing.assert_allclose(replaced[1].numpy(), update[1].numpy())


def test_canaries_are_near_orthogonal_and_seeded():
  directions = canaries.CanaryDirections(seed=8, num_params=20000, count=200)
  explicit = np.stack([directions.direction(r).numpy()
                       for r in directions.hadamard_rows()])
  gram = explicit @ explicit.T
  off = gram[~np.eye(200, dtype=bool)]
  # Independent random sign vectors: sd 1/sqrt(d) = 0.0071.
  assert abs(off.mean()) < 0.002 and off.std() < 0.02
  again = canaries.CanaryDirections(seed=8, num_params=20000, count=200)
  np.testing.assert_array_equal(again.hadamard_rows(),
                                directions.hadamard_rows())
  other = canaries.CanaryDirections(seed=9, num_params=20000, count=200)
  assert not np.array_equal(other.signs().numpy(), directions.signs().numpy())


def test_too_many_canaries_for_the_model_are_refused():
  with pytest.raises(ValueError, match='do not fit a model of 100'):
    canaries.CanaryDirections(seed=0, num_params=100, count=200)


def test_a_gradient_sum_is_its_directions_summed_both_ways():
  """Few rows are summed one by one, many through one transform: both are
  the explicit sum."""
  directions = canaries.CanaryDirections(seed=3, num_params=300, count=40)
  explicit = _explicit(directions)
  like = [tf.zeros([20, 10]), tf.zeros([100])]
  for picked in ([], [4], [0, 3, 3, 39], list(range(40))):
    rows = directions.hadamard_rows()[picked]
    summed = directions.gradient_sum(tf.constant(rows, tf.int32), like)
    assert [s.shape for s in summed] == [[20, 10], [100]]
    flat = np.concatenate([s.numpy().ravel() for s in summed])
    np.testing.assert_allclose(flat, explicit[picked].sum(axis=0), atol=1e-5)


def _linear_model(dim):
  """A linear model of `dim` parameters (on x = 0 every example's gradient
  is 0, so a DP-SGD update is its noise plus whatever canaries add)."""
  def model_fn():
    keras = tf.keras.Sequential([
        tf.keras.layers.Input([dim]),
        tf.keras.layers.Dense(1, use_bias=False)])
    return tff.learning.models.from_keras_model(
        keras, loss=tf.keras.losses.MeanSquaredError(),
        input_spec=(tf.TensorSpec([None, dim]), tf.TensorSpec([None, 1])))
  return model_fn


def _squared_error(y, p):
  return tf.reduce_sum((y - p)**2, axis=-1)


def test_canary_examples_add_their_clipped_gradients_and_nothing_else():
  """d = 32 = m: the 16 rows are exactly orthogonal, so projecting the
  difference a canary run makes recovers how many steps each canary joined;
  the real examples' sampling and noise are the run without canaries'."""
  dim, steps, rate, lr, clip = 32, 50, 0.3, 0.1, 2.0
  audit = canaries.ExampleCanaries.create(seed=5, num_params=dim,
                                          per_client=8, num_clients=1)
  model_fn = _linear_model(dim)
  train = dp_sgd.build_local_dp_sgd(model_fn(), _squared_error, lr, clip,
                                    canaries=audit.directions)
  model = model_fn()
  weights = tff.learning.models.ModelWeights.from_model(model)
  data = (tf.zeros([40, dim]), tf.zeros([40, 1]))
  rows = audit.rows(0).numpy()
  args = (weights, data, 1.5, rate, steps, tf.constant([4, 1], tf.int64))
  plain, noise = train(*args)
  with_canaries, same_noise = train(*args, canary_rows=tf.constant(rows[0]))
  np.testing.assert_array_equal(noise[0].numpy(), same_noise[0].numpy())
  diff = with_canaries[0].numpy().ravel() - plain[0].numpy().ravel()
  explicit = {r: audit.directions.direction(r).numpy() for r in rows.ravel()}
  # A pseudo-gradient: initial - final = lr * (c / B) * sum of joined v.
  per_step = lr * clip / (rate * 40)
  joined = np.array([explicit[r] @ diff / per_step for r in rows[0]])
  np.testing.assert_allclose(joined, np.round(joined), atol=1e-3)
  assert joined.min() >= 0 and joined.max() <= steps
  assert 11 < joined.mean() < 19  # Binomial(50, 0.3) has mean 15
  unseen = np.array([explicit[r] @ diff for r in rows[1]])
  np.testing.assert_allclose(unseen, 0, atol=1e-6)


def test_the_client_work_sums_each_clients_dots_with_its_canaries():
  """The state after two rounds holds, per client, sum_t <u_t, v> over its
  inserted then unseen canaries and sum_t ||u_t||^2, as computed here from
  the updates the clients sent."""
  dim, num_clients = 64, 3
  audit = canaries.ExampleCanaries.create(seed=2, num_params=dim,
                                          per_client=4, num_clients=num_clients)
  work = dp_sgd.build_dp_sgd_client_work(
      _linear_model(dim), _squared_error, 0.1, 1.0, audit)
  privacy = plans.plan_client_privacy(4.0, 1e-5, 20, 5, rounds=2)
  rng = np.random.default_rng(0)
  data = [dp_sgd.make_client_data(
      tf.data.Dataset.from_tensor_slices(
          (rng.normal(size=[20, dim]).astype(np.float32),
           rng.normal(size=[20, 1]).astype(np.float32))).batch(5),
      privacy, weight=1.0, seed=10 + i, index=i) for i in range(num_clients)]
  weights = tff.learning.models.ModelWeights(
      [rng.normal(size=[dim, 1]).astype(np.float32)], [])
  state = work.initialize()
  dots = np.zeros([num_clients, 8])
  squares = np.zeros(num_clients)
  for _ in range(2):
    output = work.next(state, [weights] * num_clients, data)
    state = output.state
    for i, result in enumerate(output.result):
      u = np.asarray(result.update[0]).ravel()
      rows = audit.rows(i).numpy().ravel()
      dots[i] += [audit.directions.direction(r).numpy() @ u for r in rows]
      squares[i] += u @ u
  assert state[dp_sgd.ROUND_KEY] == 2
  np.testing.assert_allclose(state[dp_sgd.CANARY_DOTS_KEY], dots, rtol=1e-4,
                             atol=1e-6)
  np.testing.assert_allclose(state[dp_sgd.UPDATE_SQUARED_NORMS_KEY], squares,
                             rtol=1e-5)
  np.testing.assert_allclose(dp_sgd.canary_scores(state),
                             dots / np.sqrt(squares)[:, None], rtol=1e-4,
                             atol=1e-6)


def test_too_many_example_canaries_name_the_flag():
  with pytest.raises(ValueError, match=r'--canaries=20: 10 clients need 400 '
                     r'canary directions.*at most 6 per client'):
    canaries.ExampleCanaries.create(seed=0, num_params=100, per_client=20,
                                    num_clients=10)
  # School's 139 silos and 29 parameters.
  with pytest.raises(ValueError, match='too few for two per client'):
    canaries.ExampleCanaries.create(seed=0, num_params=29, per_client=2,
                                    num_clients=139)
  with pytest.raises(ValueError, match='--canaries must be >= 2'):
    canaries.ExampleCanaries.create(seed=0, num_params=100, per_client=1,
                                    num_clients=1)
