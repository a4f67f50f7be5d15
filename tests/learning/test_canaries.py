"""Canary directions, updates and scores against explicit linear algebra."""

import numpy as np
import pytest
import scipy.linalg
import tensorflow as tf

from tff_hdp.learning import canaries


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
