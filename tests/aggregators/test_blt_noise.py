"""The BLT sum's noise is C^-1 z, its covariance and prefix-sum power are
the strategy's (Monte Carlo), clipping bounds every client, and the state
resumes."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.privacy import strategy_oracles as oracles
from tff_hdp.aggregators import BltSumFactory
from tff_hdp.privacy import blt
from tff_hdp.privacy import min_separation as ms

pytestmark = pytest.mark.tf

PARAMS = blt.BltParameters((0.9, 0.5), (0.3, 0.2))
ROUNDS = 6



def _noise(process, d, rounds=ROUNDS, clients=2):
  """Each round's result with zero updates: the noise alone, [rounds, d]."""
  state, out = process.initialize(), []
  for _ in range(rounds):
    step = process.next(state, [np.zeros(d, np.float32)] * clients)
    state = step.state
    out.append(np.asarray(step.result, np.float64))
  return np.array(out), state


def test_the_noise_is_c_inverse_of_the_seeds_gaussians():
  process = BltSumFactory(PARAMS, 2.0, 0.5, seed=5).create(
      tff.TensorType(np.float32, [3]))
  noise, _ = _noise(process, 3)
  z = np.array([1.0 * tf.random.stateless_normal(
      [3], tf.random.experimental.stateless_fold_in(
          tf.constant([5, t], tf.int64), 0)).numpy() for t in range(ROUNDS)])
  c = oracles.toeplitz_matrix(PARAMS.coefficients(ROUNDS))
  np.testing.assert_allclose(c @ noise, z, atol=1e-5)  # std 2.0 * 0.5 = 1


def test_covariance_and_prefix_noise_are_the_strategys():
  """Over 30,000 coordinates: the rounds' covariance is sigma^2 C^-1 C^-T
  and the prefix sums' mean power sigma^2 `blt.prefix_noise_power`."""
  d, sigma = 30000, 1.5
  process = BltSumFactory(PARAMS, 3.0, 0.5, seed=9).create(
      tff.TensorType(np.float32, [d]))
  noise, _ = _noise(process, d)
  inverse = np.linalg.inv(oracles.toeplitz_matrix(PARAMS.coefficients(ROUNDS)))
  np.testing.assert_allclose(np.cov(noise), sigma ** 2 * inverse @ inverse.T,
                             atol=0.05 * sigma ** 2)
  prefix = np.cumsum(noise, axis=0)
  assert np.mean(prefix ** 2) == pytest.approx(
      sigma ** 2 * blt.prefix_noise_power(PARAMS.coefficients(ROUNDS)),
      rel=0.02)


def test_each_client_adds_at_most_the_clip_and_a_non_finite_one_nothing():
  process = BltSumFactory(PARAMS, 1e-6, 1.0, seed=1).create(
      tff.TensorType(np.float32, [2]))
  values = [np.array([30.0, 40.0], np.float32),     # norm 50 -> 1
            np.array([0.3, 0.4], np.float32),       # inside the ball
            np.array([np.nan, 1.0], np.float32),    # adds zero
            np.array([np.inf, 0.0], np.float32)]    # adds zero
  out = process.next(process.initialize(), values)
  np.testing.assert_allclose(out.result, [0.6 + 0.3, 0.8 + 0.4], atol=1e-4)


def test_a_resumed_state_continues_the_same_noise():
  process = BltSumFactory(PARAMS, 1.0, 1.0, seed=3).create(
      tff.TensorType(np.float32, [4]))
  whole, _ = _noise(process, 4)
  first, state = _noise(process, 4, rounds=3)
  saved = tf.nest.map_structure(np.array, state)  # as a checkpoint holds it
  again = BltSumFactory(PARAMS, 1.0, 1.0, seed=3).create(
      tff.TensorType(np.float32, [4]))
  rest = []
  for _ in range(ROUNDS - 3):
    step = again.next(saved, [np.zeros(4, np.float32)] * 2)
    saved = step.state
    rest.append(step.result)
  np.testing.assert_array_equal(np.concatenate([first, rest]), whole)


def test_for_target_meets_the_devices_epsilon():
  model = ms.MinSeparation(ROUNDS, 2, 2)
  factory = BltSumFactory.for_target(2.0, 1e-5, model, PARAMS, clip=1.0)
  noise, _ = _noise(factory.create(tff.TensorType(np.float32, [20000])),
                    20000, rounds=1)
  z = np.std(noise[0])  # round 1's noise is z * clip alone
  mu = (ms.toeplitz_sensitivity_squared(PARAMS.coefficients(ROUNDS), model)
        ** 0.5 / z)
  assert ms.gaussian_epsilon(mu, 1e-5) == pytest.approx(2.0, abs=0.05)


def test_bad_arguments_are_refused():
  with pytest.raises(ValueError, match='noise_multiplier'):
    BltSumFactory(PARAMS, 0.0, 1.0)
  with pytest.raises(ValueError, match='clip'):
    BltSumFactory(PARAMS, 1.0, -1.0)
  with pytest.raises(TypeError, match='BltParameters'):
    BltSumFactory((0.9, 0.3), 1.0, 1.0)
  with pytest.raises(TypeError, match='float32'):
    BltSumFactory(PARAMS, 1.0, 1.0).create(tff.TensorType(np.int32, [2]))


def test_each_leaf_of_a_structure_gets_its_own_correlated_noise():
  value_type = tff.StructType([('w', tff.TensorType(np.float32, [2, 2])),
                               ('b', tff.TensorType(np.float32, [3]))])
  process = BltSumFactory(PARAMS, 1.0, 1.0, seed=4).create(value_type)
  state, results = process.initialize(), []
  zeros = collections.OrderedDict(w=np.zeros([2, 2], np.float32),
                                  b=np.zeros(3, np.float32))
  for _ in range(ROUNDS):
    step = process.next(state, [zeros, zeros])
    state = step.state
    results.append(step.result)
  c = oracles.toeplitz_matrix(PARAMS.coefficients(ROUNDS))
  for i, (name, shape) in enumerate((('w', [2, 2]), ('b', [3]))):
    noise = np.array([np.ravel(r[name]) for r in results])
    z = np.array([np.ravel(tf.random.stateless_normal(
        shape, tf.random.experimental.stateless_fold_in(
            tf.constant([4, t], tf.int64), i)).numpy())
                  for t in range(ROUNDS)])
    np.testing.assert_allclose(c @ noise, z, atol=1e-5, err_msg=name)
