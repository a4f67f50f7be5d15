"""The EM in TF ops against scikit-learn, and the partition against the truth."""

import numpy as np
import pytest
from sklearn import mixture
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.privacy.plans import plan_client_privacy
from tff_hdp.learning import dp_sgd
from tff_hdp.privacy import heterogeneity
from tff_hdp.aggregators import norm_partition

pytestmark = pytest.mark.tf

NUM_CLIENTS, EXAMPLES, FEATURES, CLASSES, BATCH = 10, 256, 20, 4, 32
ROUNDS, DELTA = 20, 1e-5


def _sklearn_labels(gmm, values):
  """sklearn's labels renamed so that 0 is the smaller mean, as ours."""
  rank = np.argsort(np.argsort(gmm.means_[:, 0]))
  return rank[gmm.predict(values[:, None])]


@pytest.mark.parametrize('seed', range(8))
def test_em_is_sklearns_em_from_the_same_start(seed):
  rng = np.random.default_rng(seed)
  x = np.concatenate([rng.normal(rng.normal(0, 5), rng.uniform(0.1, 2),
                                 size=rng.integers(1, 6)) for _ in range(2)])
  fit = norm_partition.fit_two_gaussians(
      tf.constant(x), max_iterations=5000, tolerance=1e-10)
  # Ours standardizes, then starts at the ends with unit variances.
  z = (x - x.mean()) / x.std()
  gmm = mixture.GaussianMixture(
      2, tol=1e-10, max_iter=5000, means_init=[[z.min()], [z.max()]],
      precisions_init=[[[1.0]], [[1.0]]], weights_init=[0.5, 0.5]).fit(
          z[:, None])
  assert bool(fit.converged) and gmm.converged_
  np.testing.assert_array_equal(fit.labels.numpy(), _sklearn_labels(gmm, z))
  order = np.argsort(gmm.means_[:, 0])
  np.testing.assert_allclose(fit.means.numpy(),
                             x.mean() + x.std() * gmm.means_[order, 0],
                             rtol=1e-4, atol=1e-4 * x.std())
  np.testing.assert_allclose(fit.weights.numpy(), gmm.weights_[order],
                             rtol=1e-4, atol=1e-5)


def test_the_fit_does_not_depend_on_the_scale_or_order_of_the_values():
  x = np.array([1.0, 1.2, 0.9, 5.0, 5.5, 1.1, 4.8])
  base = norm_partition.fit_two_gaussians(tf.constant(x))
  scaled = norm_partition.fit_two_gaussians(tf.constant(1000 * x[::-1]))
  np.testing.assert_array_equal(base.labels.numpy(), [0, 0, 0, 1, 1, 0, 1])
  np.testing.assert_array_equal(scaled.labels.numpy()[::-1],
                                base.labels.numpy())
  np.testing.assert_allclose(scaled.means.numpy(), 1000 * base.means.numpy(),
                             rtol=1e-5)


def test_the_iteration_cap_is_reported_not_hidden():
  x = tf.constant([1.0, 2.0, 2.5, 10.0, 11.0, 13.0])
  capped = norm_partition.fit_two_gaussians(x, max_iterations=1)
  assert not bool(capped.converged) and int(capped.iterations) == 1
  full = norm_partition.fit_two_gaussians(x)
  assert bool(full.converged) and 1 < int(full.iterations) < 200


def test_values_that_cannot_be_split_are_all_component_zero():
  for values in ([3.0, 3.0, 3.0], [3.0]):
    fit = norm_partition.fit_two_gaussians(tf.constant(values))
    np.testing.assert_array_equal(fit.labels.numpy(), 0)
    assert bool(fit.converged) and int(fit.iterations) == 0


def test_bad_em_settings_are_refused():
  with pytest.raises(ValueError, match='max_iterations'):
    norm_partition.fit_two_gaussians(tf.constant([1.0, 2.0]), max_iterations=0)
  with pytest.raises(ValueError, match='tolerance'):
    norm_partition.fit_two_gaussians(tf.constant([1.0, 2.0]), tolerance=0.0)


def test_smaller_norms_are_public_and_zero_updates_too():
  rows = np.zeros((5, 3), np.float32)
  rows[:, 0] = [0.1, 5.0, 0.12, 0.0, 4.0]
  public, fit = norm_partition.public_by_update_norm(tf.constant(rows))
  np.testing.assert_array_equal(public.numpy(), [True, False, True, True,
                                                 False])
  assert fit.labels.shape == [4]  # The zero row is not fitted.


def _calibrated_plans():
  """Plans at MixGauss1-3's component means, and z(epsilon) through them.

  Calibrating each of 90 clients takes minutes; z is calibrated exactly at the
  three component means (0.1, 1, 10) and, between, is the quadratic in
  log-log through them.
  """
  anchors = np.array([0.1, 1.0, 10.0])
  plans = [plan_client_privacy(e, DELTA, EXAMPLES, BATCH, ROUNDS)
           for e in anchors]
  coefficients = np.polyfit(np.log(anchors),
                            np.log([p.noise_multiplier for p in plans]), 2)
  return plans, lambda eps: float(
      np.exp(np.polyval(coefficients, np.log(eps))))


@pytest.fixture(scope='module')
def round_norms():
  """Norms of one round of real DP-SGD updates of 10 clients, per setting."""
  model = tff.learning.models.from_keras_model(
      tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
                           tf.keras.layers.Dense(CLASSES)]),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, FEATURES], tf.float32),
                  tf.TensorSpec([None], tf.int32)))
  train = dp_sgd.build_local_dp_sgd(
      model, lambda y, p: tf.keras.losses.sparse_categorical_crossentropy(
          y, p, from_logits=True), learning_rate=0.1, clip_norm=1.0)
  initial = tf.nest.map_structure(
      tf.zeros_like, tff.learning.models.ModelWeights.from_model(model))
  (plan, *_), noise_multiplier = _calibrated_plans()

  def norms(name, seed):
    eps, components = heterogeneity.sample_epsilons(
        heterogeneity.EPSILON_DISTRIBUTIONS[name], NUM_CLIENTS, seed)
    rng = np.random.default_rng(seed)
    teacher = rng.normal(size=(FEATURES, CLASSES))
    out = []
    for i in range(NUM_CLIENTS):
      x = rng.normal(size=(EXAMPLES, FEATURES)).astype(np.float32)
      y = np.argmax(x @ teacher, axis=1).astype(np.int32)
      update, _ = train(initial,
                        tf.data.Dataset.from_tensor_slices((x, y)).batch(64),
                        tf.constant(noise_multiplier(eps[i]), tf.float32),
                        tf.constant(plan.sampling_rate, tf.float32),
                        tf.constant(plan.steps_per_round, tf.int32),
                        tf.constant([seed, i], tf.int64))
      out.append(np.sqrt(sum(np.sum(u.numpy()**2) for u in update)))
    return np.array(out), components

  return norms


@pytest.mark.parametrize('seed', [0, 1, 2])
@pytest.mark.parametrize('name', ['mixgauss1', 'mixgauss2', 'mixgauss3'])
def test_partition_of_real_update_norms_is_sklearns_and_the_truth(
    round_norms, name, seed):
  norms, components = round_norms(name, seed)
  public, fit = norm_partition.public_by_update_norm(
      tf.constant(norms[:, None], tf.float32))
  assert bool(fit.converged)
  logs = np.log(norms)
  gmm = mixture.GaussianMixture(2, n_init=10, random_state=seed).fit(
      logs[:, None])
  np.testing.assert_array_equal(public.numpy(),
                                _sklearn_labels(gmm, logs) == 0)
  # MixGauss1-2: the epsilon-10 component. MixGauss3 in two clusters: its
  # epsilon-1 and epsilon-10 components against its epsilon-0.1 one.
  np.testing.assert_array_equal(public.numpy(), components >= 1)
