"""Federated mean estimation (SPEC.md §2), run through the real MR-MTL process.

Each coordinate of a silo's data vector is an independent trial, so one run
gives thousands of Monte Carlo trials. The run is the MR-MTL paper's setting:
  1. round 1, local training (lambda = 0): one full-batch DP-SGD step from 0
     with learning rate 1 on `1/2 ||w - x||^2` makes each silo's model its
     private mean `w_hat_k = (sum_i x_i + xi_k) / n` (the noise multiplier is
     `sigma_DP / c` with a clip norm `c` that never binds);
  2. round 2, MR-MTL(lambda) on the released estimates (post-processing: the
     silo's one example is `w_hat_k`, no further noise): one step of learning
     rate `1/(1+lambda)` from `w_hat_k` lands exactly on the minimizer of
     `1/2 (w - w_hat_k)^2 + lambda/2 (w - w_bar)^2`, and `w_bar` (already the
     mean of the `w_hat_k` after round 1) stays put.
The empirical error of the personal models against the true silo centres is
then compared with `tff_hdp.estimation.mean_estimation_theory`.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.privacy import plans
from tff_hdp.learning import cross_silo_process
from tff_hdp.estimation import mean_estimation_theory as theory

# A clip norm far above any per-example gradient's norm: clipping never acts.
_NO_CLIP_NORM = 1e6


def _model_fn(trials: int):
  """A bias-only model: a zero input, so the prediction is the bias."""
  spec = (tf.TensorSpec([None, 1], tf.float32),
          tf.TensorSpec([None, trials], tf.float32))

  def model_fn():
    keras = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(1,)),
        tf.keras.layers.Dense(trials, kernel_initializer='zeros',
                              bias_initializer='zeros'),
    ])
    return tff.learning.models.from_keras_model(
        keras, loss=tf.keras.losses.MeanSquaredError(), input_spec=spec)

  return model_fn


def _squared_loss(y, predictions):
  return 0.5 * tf.reduce_sum(tf.square(y - predictions), axis=-1)


def _privacy(num_examples: int, noise_multiplier: float) -> plans.ClientPrivacy:
  """One full-batch step (Poisson rate 1) per round at a given noise."""
  return plans.ClientPrivacy(
      epsilon=float('nan'), delta=0.0, num_examples=num_examples,
      batch_size=num_examples, rounds=1, epochs_per_round=1,
      sampling_rate=1.0, steps_per_round=1,
      noise_multiplier=noise_multiplier)


def _dataset(y: np.ndarray) -> tf.data.Dataset:
  x = np.zeros((len(y), 1), np.float32)
  return tf.data.Dataset.from_tensor_slices((x, y.astype(np.float32))).batch(
      len(y))


def _round(process, state, personal, datasets, privacy, lam, seed):
  # Step size 1/(1+lambda): one full-batch step lands on the minimizer.
  role = cross_silo_process.make_role(1.0 / (1.0 + lam), lam, False, 0.0, 0, 1)
  data = [cross_silo_process.make_client_data(d, privacy, 1.0, seed + k, role)
          for k, d in enumerate(datasets)]
  state, outputs, _ = process.next(state, personal, data)
  return state, [o['personal'] for o in outputs]


def mrmtl_errors(setting: theory.MeanEstimationSetting,
                 lambdas: list[float], trials: int,
                 seed: int = 0) -> dict[float, float]:
  """Empirical E(lambda) of MR-MTL's personal estimates, per lambda."""
  rng = np.random.default_rng(seed)
  k, n = setting.num_silos, setting.samples
  centres = rng.normal(0.0, setting.tau, size=(k, trials))
  samples = centres[:, None, :] + rng.normal(
      0.0, setting.sigma, size=(k, n, trials))
  model_fn = _model_fn(trials)
  loss = _squared_loss
  process = cross_silo_process.build_cross_silo_process(
      model_fn, loss, None, clip_norm=_NO_CLIP_NORM)
  state = process.initialize()
  zeros = cross_silo_process.cluster_weights(state, 0).trainable
  state, estimates = _round(
      process, state, [zeros] * k, [_dataset(x) for x in samples],
      _privacy(n, setting.sigma_dp / _NO_CLIP_NORM), 0.0, seed)
  released = [_dataset(e[1][None, :]) for e in estimates]
  errors = {}
  for lam in lambdas:
    _, personal = _round(process, state, estimates, released,
                         _privacy(1, 0.0), lam, seed + k)
    fitted = np.stack([p[1] for p in personal])
    errors[lam] = float(np.mean(np.square(fitted - centres)))
  return errors
