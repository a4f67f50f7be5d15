"""Robust PCA by principal component pursuit, in TensorFlow ops.

`min ||L||_* + lam ||S||_1  s.t.  M = L + S` (Candès et al. 2009), solved by
the inexact augmented Lagrange multiplier method (Lin, Chen & Ma 2010). It is
written in TF rather than numpy because Robust-HDP runs it inside a TFF server
computation, which TFF's C++ runtime executes without a Python interpreter; the
same function runs eagerly on numpy arrays for analysis and benchmarks.
"""

from __future__ import annotations

import collections

import tensorflow as tf

PcpResult = collections.namedtuple(
    'PcpResult', ['low_rank', 'sparse', 'converged', 'iterations'])


def _shrink(x, tau):
  return tf.sign(x) * tf.maximum(tf.abs(x) - tau, 0.0)


def _singular_value_threshold(x, tau):
  """`U shrink(S, tau) V^T` of `x = U S V^T`, via the n x n Gram matrix.

  `U shrink(S) V^T = x V diag(max(1 - tau / s, 0)) V^T`, and `V`, `s^2` are
  the eigenpairs of `x^T x`: two p x n x n products instead of an SVD of the
  tall p x n matrix (n clients, p parameters), several times faster. Squared
  singular values lose precision only far below the threshold, in float64.
  """
  squares, v = tf.linalg.eigh(tf.matmul(x, x, transpose_a=True))
  s = tf.sqrt(tf.maximum(squares, 0.0))
  keep = tf.maximum(1.0 - tau / tf.maximum(s, tau), 0.0)
  return tf.matmul(x, tf.matmul(v * keep, v, adjoint_b=True))


def principal_component_pursuit(m,
                                lam: float | None = None,
                                tolerance: float = 1e-7,
                                max_iterations: int = 1000,
                                rho: float = 1.1) -> PcpResult:
  """Splits `m` (p x n) into low-rank `L` and sparse `S` with `M = L + S`.

  `lam` defaults to `1 / sqrt(max(p, n))`. Iterates until
  `||M - L - S||_F <= tolerance ||M||_F` or `max_iterations`; `converged` says
  which, and `iterations` how many were used. Computes in float64.

  `rho` is how fast the penalty mu grows. The residual test alone can pass
  before S has settled: once mu is large the shrinkage threshold `lam / mu`
  vanishes and S freezes where it is. With Lin et al.'s rho = 1.5, S's column
  norms on real DP-SGD updates (20 Fashion-MNIST clients, 159,010
  parameters) came out 36-97% of the drawn noise's and Robust-HDP's aggregate
  was 2-3% noisier than the oracle's; rho = 1.1 (about 4x the iterations)
  brings them to 89-100% and the aggregate within 0.02% of the oracle's.
  """
  m = tf.cast(m, tf.float64)
  shape = tf.shape(m)
  if lam is None:
    lam = 1.0 / tf.sqrt(tf.cast(tf.reduce_max(shape), tf.float64))
  lam = tf.cast(lam, tf.float64)
  norm_fro = tf.norm(m)
  spectral = tf.reduce_max(tf.linalg.svd(m, compute_uv=False))
  dual_norm = tf.maximum(spectral, tf.reduce_max(tf.abs(m)) / lam)
  safe = lambda x: tf.maximum(x, tf.keras.backend.epsilon())
  y = m / safe(dual_norm)
  mu = 1.25 / safe(spectral)
  mu_max = mu * 1e7
  zeros = tf.zeros_like(m)

  def not_done(i, low, sparse, y, mu, err):
    del low, sparse, y, mu
    return tf.logical_and(i < max_iterations, err > tolerance)

  def step(i, low, sparse, y, mu, err):
    del low, err
    low = _singular_value_threshold(m - sparse + y / mu, 1.0 / mu)
    sparse = _shrink(m - low + y / mu, lam / mu)
    residual = m - low - sparse
    y = y + mu * residual
    err = tf.math.divide_no_nan(tf.norm(residual), norm_fro)
    return i + 1, low, sparse, y, tf.minimum(mu * rho, mu_max), err

  iterations, low, sparse, _, _, err = tf.while_loop(
      not_done, step,
      (tf.constant(0), zeros, zeros, y, mu, tf.constant(float('inf'),
                                                        tf.float64)))
  return PcpResult(low, sparse, err <= tolerance, iterations)


def blocked_noise_variances(m,
                            block_rows: int,
                            tolerance: float = 1e-7,
                            max_iterations: int = 1000):
  """Robust-HDP's per-column noise variances `||S[:, i]||^2 / p`, blockwise.

  `m` is p x n with a static p. Rows are split into `ceil(p / block_rows)`
  near-equal blocks, each decomposed on its own with its own
  `lam = 1 / sqrt(max(p_b, n))`; the blocks' estimates are averaged weighted
  by their row counts. Returns the `[n]` estimates, whether every block
  converged, and the most iterations any block used.
  """
  m = tf.cast(m, tf.float64)
  p = int(m.shape[0])
  if block_rows < 1:
    raise ValueError(f'block rows must be >= 1, got {block_rows}.')
  num_blocks = -(-p // block_rows)
  bounds = [p * b // num_blocks for b in range(num_blocks + 1)]
  total = 0.0
  converged = tf.constant(True)
  iterations = tf.constant(0)
  for start, stop in zip(bounds[:-1], bounds[1:]):
    result = principal_component_pursuit(
        m[start:stop], tolerance=tolerance, max_iterations=max_iterations)
    total += tf.reduce_sum(tf.square(result.sparse), axis=0)
    converged = tf.logical_and(converged, result.converged)
    iterations = tf.maximum(iterations, result.iterations)
  return total / p, converged, iterations
