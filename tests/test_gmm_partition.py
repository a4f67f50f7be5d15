"""GMM on update norms recovers who is public, from real DP-SGD updates."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp import dp_sgd
from tff_hdp import gmm_partition
from tff_hdp import heterogeneity

NUM_CLIENTS, EXAMPLES, FEATURES, CLASSES = 10, 256, 20, 4


@pytest.fixture(scope='module')
def local_round():
  """One round of DP-SGD for a client, from one fixed model."""
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
      lambda v: tf.zeros_like(v),
      tff.learning.models.ModelWeights.from_model(model))

  def run(dataset, plan, seed):
    update, _ = train(initial, dataset,
                      tf.constant(plan.noise_multiplier, tf.float32),
                      tf.constant(plan.sampling_rate, tf.float32),
                      tf.constant(plan.steps_per_round, tf.int32),
                      tf.constant([seed, 0], tf.int64))
    return np.sqrt(sum(np.sum(u.numpy()**2) for u in update))

  return run


def _datasets(seed):
  rng = np.random.default_rng(seed)
  teacher = rng.normal(size=(FEATURES, CLASSES))
  out = []
  for _ in range(NUM_CLIENTS):
    x = rng.normal(size=(EXAMPLES, FEATURES)).astype(np.float32)
    y = np.argmax(x @ teacher, axis=1).astype(np.int32)
    out.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(64))
  return out


@pytest.mark.parametrize('seed', [0, 1, 2])
@pytest.mark.parametrize('name', ['mixgauss1', 'mixgauss2', 'mixgauss3'])
def test_clusters_of_norms_match_the_true_privacy_attitudes(
    local_round, name, seed):
  dist = heterogeneity.EPSILON_DISTRIBUTIONS[name]
  eps, components = heterogeneity.sample_epsilons(dist, NUM_CLIENTS, seed)
  norms = []
  for i, dataset in enumerate(_datasets(seed)):
    plan = dp_sgd.plan_client_privacy(eps[i], 1e-5, EXAMPLES, 32, rounds=20)
    norms.append(local_round(dataset, plan, 100 * seed + i))
  k = len(dist.weights)
  labels = gmm_partition.cluster_update_norms(norms, k, seed=seed)
  # Cluster 0 has the smallest norms: the most relaxed (largest) epsilons.
  by_relaxation = (k - 1) - components  # component k-1 has the largest mean
  np.testing.assert_array_equal(labels, by_relaxation)
  public = gmm_partition.public_clients(norms, k, seed=seed)
  np.testing.assert_array_equal(public, components == k - 1)


def test_bad_norms_are_refused():
  with pytest.raises(ValueError, match='finite positive'):
    gmm_partition.cluster_update_norms([1.0, 0.0, 2.0])
  with pytest.raises(ValueError, match='clusters'):
    gmm_partition.cluster_update_norms([1.0, 2.0], num_clusters=3)
