"""Public / private clients from the L2 norms of their noisy updates (PDP-FL).

When clients keep their privacy budgets to themselves, the server can still
tell the cautious from the relaxed: DP noise dominates an update's norm and
grows as epsilon shrinks. A two-component Gaussian mixture on the log norms
splits the clients; the component with the smaller mean norm (less noise) is
"public". Logs, because noise norms of different budgets differ by factors,
which makes the clusters comparable in width.

The mixture is fitted by EM in TensorFlow ops so that it runs inside a TFF
computation (scikit-learn cannot: TFF's runtime has no Python). EM starts
deterministically from the smallest and largest value, so a round's partition
is a function of its updates alone; whether EM met its tolerance is returned,
never assumed.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

# Added to each fitted variance of the standardized values, as scikit-learn's
# `reg_covar`, so a component holding one client stays finite.
_VARIANCE_FLOOR = 1e-6


class TwoGaussians(NamedTuple):
  """A fitted 1-D two-component mixture; component 0 has the smaller mean.

  `means` and `variances` are in the units of the fitted values. `labels` is
  each value's most probable component. `converged` is False when EM stopped
  at its iteration cap; the fit is still returned.
  """

  means: tf.Tensor
  variances: tf.Tensor
  weights: tf.Tensor
  labels: tf.Tensor
  converged: tf.Tensor
  iterations: tf.Tensor


def _log_joint(x, means, variances, weights):
  """`log w_k + log N(x_i; m_k, v_k)`, shape [n, 2]."""
  return (tf.math.log(weights) - 0.5 * tf.math.log(2 * np.pi * variances) -
          0.5 * tf.square(x[:, None] - means) / variances)


def _m_step(z, resp):
  """Weights, means and variances (floored) given responsibilities [n, 2]."""
  counts = tf.reduce_sum(resp, 0) + 10 * np.finfo(np.float64).eps
  means = tf.reduce_sum(resp * z[:, None], 0) / counts
  variances = tf.reduce_sum(resp * tf.square(z[:, None] - means),
                            0) / counts + _VARIANCE_FLOOR
  return means, variances, counts / tf.cast(tf.size(z), tf.float64)


def fit_two_gaussians(values: tf.Tensor,
                      max_iterations: int = 200,
                      tolerance: float = 1e-6) -> TwoGaussians:
  """Maximum-likelihood two-component mixture of `values` ([n]) by EM.

  The values are standardized first, so the fit does not depend on their
  scale. EM starts from means at the smallest and largest value, unit
  variances and equal weights, and stops when the mean log-likelihood per
  value changes by less than `tolerance` or after `max_iterations` steps.
  Fewer than two distinct values cannot be split: all are labelled 0, with
  `converged` True after 0 iterations.
  """
  if max_iterations < 1 or not tolerance > 0:
    raise ValueError('EM needs max_iterations >= 1 and tolerance > 0, got '
                     f'{max_iterations} and {tolerance}.')
  x = tf.cast(tf.reshape(values, [-1]), tf.float64)
  n = tf.size(x)
  center = tf.reduce_mean(x)
  scale = tf.math.reduce_std(x)
  splittable = tf.logical_and(n >= 2, scale > 0)
  z = (x - center) / tf.where(splittable, scale, tf.ones([], tf.float64))
  # Guarded so that an empty `values` gives no reduction over nothing.
  ends = tf.cond(splittable,
                 lambda: tf.stack([tf.reduce_min(z), tf.reduce_max(z)]),
                 lambda: tf.zeros([2], tf.float64))

  def step(i, means, variances, weights, previous, done):
    del done  # Read by the loop condition only.
    log_joint = _log_joint(z, means, variances, weights)
    log_likelihood = tf.reduce_logsumexp(log_joint, axis=1)
    new_means, new_variances, new_weights = _m_step(
        z, tf.exp(log_joint - log_likelihood[:, None]))
    mean_log_likelihood = tf.reduce_mean(log_likelihood)
    done = tf.abs(mean_log_likelihood - previous) < tolerance
    return (i + 1, new_means, new_variances, new_weights, mean_log_likelihood,
            done)

  iterations, means, variances, weights, _, converged = tf.while_loop(
      lambda i, m, v, w, ll, done: tf.logical_and(i < max_iterations,
                                                  tf.logical_not(done)),
      step,
      (tf.constant(0), ends, tf.ones([2], tf.float64),
       tf.fill([2], tf.constant(0.5, tf.float64)),
       tf.constant(-np.inf, tf.float64), tf.logical_not(splittable)))
  order = tf.argsort(means)
  means, variances, weights = (tf.gather(t, order)
                               for t in (means, variances, weights))
  labels = tf.where(
      splittable,
      tf.argmax(_log_joint(z, means, variances, weights), axis=1,
                output_type=tf.int32), tf.zeros([n], tf.int32))
  scale = tf.where(splittable, scale, tf.zeros([], tf.float64))
  return TwoGaussians(
      means=tf.cast(center + scale * means, tf.float32),
      variances=tf.cast(tf.square(scale) * variances, tf.float32),
      weights=tf.cast(weights, tf.float32),
      labels=labels,
      converged=converged,
      iterations=iterations)


def public_by_update_norm(rows: tf.Tensor,
                          max_iterations: int = 200,
                          tolerance: float = 1e-6):
  """Which rows ([n, p] updates) are public, and the fit of their log norms.

  Public means in the mixture component of smaller norms. A zero update has
  no noise in it and is public; it is left out of the fit, which needs logs.
  """
  norms = tf.norm(tf.cast(rows, tf.float64), axis=1)
  nonzero = norms > 0
  fit = fit_two_gaussians(
      tf.math.log(tf.boolean_mask(norms, nonzero)), max_iterations, tolerance)
  labels = tf.scatter_nd(tf.where(nonzero), fit.labels,
                         tf.shape(norms, out_type=tf.int64))
  return tf.equal(labels, 0), fit
