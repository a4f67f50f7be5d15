"""A clipped sum with BLT-correlated noise: DP-FTRL's server step for one
group, without sampling.

Each client's update is clipped to `clip` (L2 over all leaves; a non-finite
update adds zero) and summed by an inner factory. Round t's sum gets
n_t = z_t - sum_i omega_i S_i, with z_t ~ N(0, (z clip)^2 I) drawn statelessly
from (seed, t), and buffers S_i <- theta_i S_i + n_t: that is n = C^-1 z for
the BLT strategy C (`tff_hdp.privacy.blt`), generated round by round in
O(buffers x d) state. A server that adds up the noisy sums (plain SGD on
them) releases A x + A C^-1 z, which `tff_hdp.privacy.min_separation`
accounts under the devices' participation model: one Gaussian mechanism of
sensitivity `||C p||` over the patterns p the model allows.

The clip is fixed: the mechanism's sensitivity is of C applied to updates
of norm at most `clip` in every round. The state (round, seed, buffers) is
a value like any other, so a run resumes from it.
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import clipping
from tff_hdp.privacy import blt
from tff_hdp.privacy import dp_randomness
from tff_hdp.privacy import min_separation


def _flatten(value) -> list:
  """The leaves of a TFF struct without a Python container, or of a Python
  structure (what a learning process's deltas are)."""
  if isinstance(value, tff.structure.Struct):
    return tff.structure.flatten(value)
  return tf.nest.flatten(value)


def _pack(like, leaves):
  """`leaves` in the structure of `like` (as `_flatten` reads it)."""
  if isinstance(like, tff.structure.Struct):
    return tff.structure.pack_sequence_as(like, leaves)
  return tf.nest.pack_sequence_as(like, leaves)


def _validate(parameters, noise_multiplier, clip, inner) -> None:
  if not isinstance(parameters, blt.BltParameters):
    raise TypeError('parameters must be a tff_hdp.privacy.blt.BltParameters, '
                    f'got {type(parameters).__name__}.')
  if not noise_multiplier > 0:
    raise ValueError(f'noise_multiplier must be > 0, got {noise_multiplier}.')
  if not clip > 0:
    raise ValueError(f'clip must be > 0, got {clip}.')
  if not isinstance(inner, tff.aggregators.UnweightedAggregationFactory):
    raise TypeError('the inner factory must be a tff.aggregators.'
                    f'UnweightedAggregationFactory, got {type(inner).__name__}.')


class BltSumFactory(tff.aggregators.UnweightedAggregationFactory):
  """Sum of updates clipped to `clip`, plus BLT-correlated Gaussian noise of
  std `noise_multiplier * clip` per round (see the module docstring)."""

  def __init__(self, parameters: blt.BltParameters, noise_multiplier: float,
               clip: float, seed: int | None = None,
               inner: tff.aggregators.UnweightedAggregationFactory | None = None,
               clip_updates: bool = True) -> None:
    """`clip_updates=False`: the values arrive as sums of device updates
    each already clipped to `clip` (a cohort's, `PerGroupStreamsFactory`),
    so they are summed as they are; the noise is the same."""
    inner = tff.aggregators.SumFactory() if inner is None else inner
    _validate(parameters, noise_multiplier, clip, inner)
    self._thetas = np.array(parameters.thetas, np.float32)
    self._omegas = np.array(parameters.omegas, np.float32)
    self._noise_std = float(noise_multiplier) * float(clip)
    self._clip = float(clip)
    self._clip_updates = bool(clip_updates)
    self._seed = dp_randomness.fresh_secret() if seed is None else int(seed)
    self._inner = inner
    self._parameters = parameters

  def noise_strategy(self, rounds: int) -> min_separation.ToeplitzNoise:
    """The strategy its noise follows over `rounds` rounds (BLT's Toeplitz
    coefficients): what a run's ledger must account for this stream
    (`tff_hdp.learning.correlated_noise.check_applied_noise`)."""
    return min_separation.ToeplitzNoise(
        tuple(self._parameters.coefficients(rounds)))

  @classmethod
  def for_target(cls, epsilon: float, delta: float,
                 model: min_separation.MinSeparation,
                 parameters: blt.BltParameters, clip: float,
                 seed: int | None = None) -> BltSumFactory:
    """The factory whose noise gives a device of `model` (epsilon, delta)."""
    sensitivity2 = min_separation.toeplitz_sensitivity_squared(
        parameters.coefficients(model.rounds), model)
    z = min_separation.calibrate_noise_multiplier(epsilon, delta, model,
                                                  sensitivity2)
    return cls(parameters, z, clip, seed)

  def create(self, value_type: tff.types.Type
             ) -> tff.templates.AggregationProcess:
    """The process for float32 updates of `value_type`.

    Raises:
      TypeError: `value_type` is not a structure of float32 tensors.
    """
    value_type = tff.types.to_type(value_type)
    leaves = tff.structure.flatten(value_type) if isinstance(
        value_type, tff.StructType) else [value_type]
    if not leaves or not all(isinstance(t, tff.TensorType) and
                             t.dtype == np.float32 and None not in t.shape
                             for t in leaves):
      raise TypeError('BLT noise needs fully defined float32 tensors, got '
                      f'{value_type}.')
    buffers = len(self._thetas)
    inner = self._inner.create(value_type)

    @tff.tensorflow.computation
    def initial_state():
      return collections.OrderedDict(
          round_num=tf.constant(0, tf.int64),
          seed=tf.constant(self._seed, tf.int64),
          buffers=[tf.zeros([buffers, *t.shape], tf.float32) for t in leaves])

    state_type = initial_state.type_signature.result

    @tff.tensorflow.computation(value_type)
    def clip_update(value):
      flat = _flatten(value)
      norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(x)) for x in flat]))
      scale, finite = clipping.safe_clip_scale(norm, self._clip)
      clipped = clipping.zero_unless(finite, [x * scale for x in flat])
      return _pack(value, clipped)

    @tff.tensorflow.computation(state_type, value_type)
    def add_noise(state, total):
      seed = tf.stack([state['seed'], state['round_num']])
      thetas = tf.constant(self._thetas)
      omegas = tf.constant(self._omegas)
      noisy, new_buffers = [], []
      for i, (x, s) in enumerate(zip(_flatten(total),
                                     state['buffers'])):
        shape = [buffers] + [1] * x.shape.rank
        z = self._noise_std * tf.random.stateless_normal(
            tf.shape(x), tf.random.experimental.stateless_fold_in(seed, i))
        n = z - tf.reduce_sum(tf.reshape(omegas, shape) * s, axis=0)
        new_buffers.append(tf.reshape(thetas, shape) * s + n)
        noisy.append(x + n)
      new_state = collections.OrderedDict(
          round_num=state['round_num'] + 1, seed=state['seed'],
          buffers=new_buffers)
      return new_state, _pack(total, noisy)

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip(collections.OrderedDict(
          own=tff.federated_eval(initial_state, tff.SERVER),
          inner=inner.initialize()))

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      if self._clip_updates:
        value = tff.federated_map(clip_update, value)
      summed = inner.next(state['inner'], value)
      own, result = tff.federated_map(add_noise, (state['own'],
                                                  summed.result))
      return tff.templates.MeasuredProcessOutput(
          tff.federated_zip(collections.OrderedDict(own=own,
                                                    inner=summed.state)),
          result, summed.measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)
