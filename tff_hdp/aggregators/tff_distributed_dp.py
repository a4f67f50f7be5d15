"""TFF's distributed-DP secure sum, built and read where TFF exports no way.

TFF 0.87 builds `DistributedDpSumFactory` (clip, rotation, scaling and
randomized rounding to integers, each client's share of discrete noise,
`SecureSumFactory`'s modular sum) in its internal `aggregators.
distributed_dp` module, and exports it only inside `tff.learning.
ddp_secure_aggregator`, whose clip adapts from 0.1 under a mean and
zeroing: not a sum at a group's own fixed clip. The numbers a group's
accounting needs (the inflated L2 and L1 bounds and the local std in the
integer domain, the padded dimension) are in the built process's state,
which only TFF's own `_unpack_state` and `_padded_dim` know how to read;
the process's round measurements carry some of them, after a round has
run, and never the L1 bound Skellam's accounting needs. A search over
noise multipliers cannot afford a build per probe (seconds each), so
`noise_at` redoes the factory's arithmetic with TFF's own helpers
(milliseconds). A cohort (`tff_hdp.learning.cohort`) is one TFF client
holding many devices' updates; `CohortDpSumFactory` runs each device's
update through the steps TFF's built process takes at CLIENTS, from
TFF's own functions (its clip, rounding, DP query, modular clip, seeds)
and, for the DFT rotation, which TFF writes only as a closure inside its
factory, a copy of its few lines tested against TFF's. So every reach into TFF's internal names is here, and
only here: a TFF upgrade that moves them, or changes the arithmetic,
fails this module's tests first.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp
# pylint: disable=g-direct-tensorflow-import
from tensorflow_federated.python.aggregators import concat
from tensorflow_federated.python.aggregators import discretization
from tensorflow_federated.python.aggregators import distributed_dp
from tensorflow_federated.python.aggregators import modular_clipping
from tensorflow_federated.python.aggregators import robust
from tensorflow_federated.python.aggregators import rotation
# pylint: enable=g-direct-tensorflow-import

from tff_hdp.aggregators import stacking
from tff_hdp.privacy import distributed_noise

# The command line's names of TFF's mechanisms.
MECHANISMS = {'dgauss': 'distributed_dgauss', 'skellam': 'distributed_skellam'}
# The command line's names of TFF's rounding, as its beta: conditional
# randomized rounding (a device rounds again until its integers' norm is
# within the bound beta sets; Kairouz, Liu, Steinke 2021, Section 4, at
# their and TFF's recommended beta = exp(-0.5)), whose rounding error adds
# to the clip in quadrature, or unconditional (beta 0, TFF's default), whose
# bound adds sqrt(d) / scale to the clip: at 16 bits and a noisy group's
# small scale, the difference between a usable noise multiplier and none.
ROUNDING = {'conditional': math.exp(-0.5), 'unconditional': 0.0}


def sum_factory(mechanism: str, noise_multiplier: float,
                clients_per_round: int, bits: int, clip: float,
                rounding: str = 'conditional'
                ) -> tff.aggregators.UnweightedAggregationFactory:
  """TFF's distributed-DP sum (`mechanism` 'dgauss' or 'skellam') at a
  fixed clip, its modular wrap as likely as `distributed_noise`'s bit
  check assumes, its rounding `rounding` (a key of `ROUNDING`).

  Raises:
    ValueError: TFF's own checks, e.g. `bits` too few for the clients.
  """
  if mechanism not in MECHANISMS:
    raise ValueError(f'mechanism must be one of {sorted(MECHANISMS)}, got '
                     f'{mechanism!r}.')
  if rounding not in ROUNDING:
    raise ValueError(f'rounding must be one of {sorted(ROUNDING)}, got '
                     f'{rounding!r}.')
  with warnings.catch_warnings():  # TFF's, that beta > 0 was chosen
    warnings.filterwarnings('ignore', message='The selected beta')
    return distributed_dp.DistributedDpSumFactory(
        noise_multiplier=noise_multiplier,
        expected_clients_per_round=int(clients_per_round), bits=int(bits),
        l2_clip=clip, modclip_prob=distributed_noise.MODCLIP_PROB,
        beta=ROUNDING[rounding], mechanism=MECHANISMS[mechanism])


@dataclasses.dataclass(frozen=True)
class BuiltNoise:
  """What TFF built for a model of some size, in the integer domain: the
  inflated L2 bound, the L1 bound (Skellam's query only; else None), each
  client's noise std, and the padded dimension."""

  l2_sensitivity: float
  l1_sensitivity: float | None
  local_stddev: float
  dim: int


def built_noise(factory: distributed_dp.DistributedDpSumFactory,
                dim: int) -> BuiltNoise:
  """`factory`'s numbers for `dim` parameters: its process's initial
  state, as TFF's DP query reads it, and TFF's padding."""
  process = factory.create(tff.TensorType(np.float32, [int(dim)]))
  # TFF's own unpacking of its nested state.
  _, _, dp_state = factory._unpack_state(process.initialize())  # pylint: disable=protected-access
  query = dp_state.query_state
  l1 = getattr(query, 'l1_norm_bound', None)
  return BuiltNoise(float(query.l2_norm_bound),
                    None if l1 is None else float(l1),
                    float(query.local_stddev),
                    int(factory._padded_dim))  # pylint: disable=protected-access


def noise_at(mechanism: str, noise_multiplier: float, clients_per_round: int,
             bits: int, clip: float, dim: int,
             rounding: str = 'conditional') -> BuiltNoise:
  """What `built_noise` reads from `sum_factory(...)`'s build for `dim`
  parameters, by the arithmetic of TFF's `_build_aggregation_factory` and
  its own helpers (its DFT padding, heuristic scale, capped at its
  `MAX_SCALE_FACTOR`, the inflated L2 bound with its 1e-5 leeway, the L1
  bound), without building a process."""
  # pylint: disable=protected-access
  padded = math.ceil(max(1, int(dim)) / 2.0) * 2
  local = noise_multiplier * clip / math.sqrt(clients_per_round)
  k = distributed_dp._clip_prob_to_num_stddevs(distributed_noise.MODCLIP_PROB)
  scale = min(distributed_dp._heuristic_scale_factor(
      local, clip, bits, clients_per_round, padded, k).numpy(),
              distributed_dp.MAX_SCALE_FACTOR)
  # pylint: enable=protected-access
  inflated = discretization.inflated_l2_norm_bound(
      l2_norm_bound=clip, gamma=1.0 / scale, beta=ROUNDING[rounding],
      dim=padded).numpy()
  l2 = (inflated + 1e-5) * scale
  l1 = (math.ceil(l2 * min(math.sqrt(padded), l2))
        if mechanism == 'skellam' else None)
  return BuiltNoise(float(np.float32(l2)),
                    None if l1 is None else float(l1),
                    float(np.float32(local * scale)), padded)


_QUERIES = {'distributed_dgauss': tfp.DistributedDiscreteGaussianSumQuery,
            'distributed_skellam': tfp.DistributedSkellamSumQuery}


def _rotate(x, seed):
  """TFF's randomized DFT of one padded vector (`rotation.
  DiscreteFourierTransformFactory`'s client transform, one repeat)."""
  x = tf.reshape(x, [2, -1])
  x = tf.complex(real=x[0], imag=x[1])
  x *= rotation.sample_cis(tf.shape(x), seed, inverse=False)
  x = tf.signal.fft(x)
  x = tf.concat([tf.math.real(x), tf.math.imag(x)], axis=0)
  return x / tf.cast(tf.sqrt(tf.size(x) / 2), rotation.OUTPUT_TF_DTYPE)


def _unrotate(x, seed):
  """The inverse of `_rotate` (TFF's server transform, one repeat)."""
  x *= tf.sqrt(tf.size(x, out_type=x.dtype) / 2.0)
  x = tf.reshape(x, [2, -1])
  x = tf.complex(real=x[0], imag=x[1])
  x = tf.signal.ifft(x)
  x *= rotation.sample_cis(tf.shape(x), seed, inverse=True)
  return tf.concat([tf.math.real(x), tf.math.imag(x)], axis=0)


class CohortDpSumFactory(tff.aggregators.UnweightedAggregationFactory):
  """`factory`'s distributed-DP sum for cohorts: a TFF client's value is
  K devices' updates stacked (every leaf [K, ...]).

  Each row goes through the client steps of the process `factory` builds
  for one device, at the numbers that build holds (its scale, its DP
  query's bounds and local std): concatenation, the round's DFT rotation
  (the seed every client gets), the L2 clip, TFF's scaling and stochastic
  rounding, the DP query's norm check and the row's own noise share, the
  modular clip (a row of zeros, a device outside the group, is zeros
  until its noise share, so it skips the rotation, clip and rounding).
  The cohort adds its rows' integers (the modular sum is linear) and
  sends one vector into TFF's modular secure sum; the server decodes as
  TFF does (modular clip, descaling, inverse rotation). So the server
  receives the sum K separate TFF clients would give, with K noise
  shares. Only the DFT rotation (TFF's default) and a fixed clip are
  supported; the rounding is the factory's (`ROUNDING`).

  `members_only`: the value is (the stacked rows, a bool[K] mask of the
  devices in the sum) and only the masked devices add a noise share, each
  of std sigma / sqrt(c), sigma the std of the K shares' sum that TFF's
  build holds and c the round's count of masked devices, which the server
  learns (a plain sum) and announces: the sum's noise is TFF's whatever c
  is. A round with fewer than `min_members` masked devices sends zeros
  (the secure sum's threshold: no sum of fewer is revealed). The noise's
  accounting at K shares bounds it (`tff_hdp.privacy.distributed_noise`).
  """

  def __init__(self, factory: distributed_dp.DistributedDpSumFactory,
               members_only: bool = False, min_members: int = 2) -> None:
    # pylint: disable=protected-access
    if factory._rotation_type != 'dft' or factory._auto_l2_clip:
      raise ValueError('cohorts run TFF\'s distributed-DP sum with the DFT '
                       'rotation and a fixed clip only.')
    # pylint: enable=protected-access
    if not min_members >= 1:
      raise ValueError(f'min_members must be >= 1, got {min_members}.')
    self._factory = factory
    self._members_only = bool(members_only)
    self._min_members = int(min_members)

  @property
  def factory(self) -> distributed_dp.DistributedDpSumFactory:
    """TFF's factory whose per-device process each row follows."""
    return self._factory

  def create(self, value_type) -> tff.templates.AggregationProcess:
    # pylint: disable=protected-access
    f = self._factory
    rows_type = value_type[0] if self._members_only else value_type
    row_type = stacking.row_type(rows_type)
    row_specs = tff.types.structure_from_tensor_type_tree(
        lambda t: tf.TensorSpec(t.shape, t.dtype), row_type)
    # TFF's build for one device: its scale and DP query, as it computed
    # them; `create` also sets the padded dimension.
    _, discrete, dp_state = f._unpack_state(f.create(row_type).initialize())
    scale = float(discrete['scale_factor'])
    query = _QUERIES[f._mechanism](**dp_state.query_state._asdict())
    dim, padded, clip = f._client_dim, f._padded_dim, float(f._l2_clip)
    beta = float(f._beta)
    low, high = -(2**(f._bits - 1)), 2**(f._bits - 1)
    # TFF's secure aggregation: its two modular clips around SecAgg.
    secure_sum = modular_clipping.ModularClippingSumFactory(
        low, high, modular_clipping.ModularClippingSumFactory(
            0, 2**f._bits, tff.aggregators.SecureSumFactory(
                2**f._bits - 1, 0))).create(
                    tff.TensorType(np.int32, [padded]))
    seed_type = rotation.SEED_TFF_TYPE

    # The std of the sum of the K shares TFF's build adds.
    total_stddev = float(dp_state.query_state.local_stddev) * math.sqrt(
        f._num_clients)
    def encode_fn(value, seed, count):
      params = query.derive_sample_params(query.initial_global_state())
      if self._members_only:
        rows, members = value
        members = tf.logical_and(members, count >= self._min_members)
        params = params._replace(local_stddev=total_stddev / tf.sqrt(
            tf.maximum(count, 1.0)))
      else:
        rows = value
        members = tf.ones([tf.shape(tf.nest.flatten(rows)[0])[0]], tf.bool)

      def integers(x):
        x, _ = robust._clip_by_global_l2_norm(_rotate(x, seed), clip)
        return discretization._discretize_struct(x, scale, True, beta, clip)

      def device(args):
        row, member = args
        x = rotation._flatten_and_pad_zeros_even(concat._concat_impl(row))
        # Zeros (a device outside the group) stay zeros through rotation,
        # clip and rounding, which TF's slow FFT need not show.
        x = tf.cond(tf.reduce_any(tf.not_equal(x, 0.0)), lambda: integers(x),
                    lambda: tf.zeros([padded], tf.int32))
        x = tf.cond(member, lambda: query.preprocess_record(params, x),
                    lambda: tf.zeros([padded], tf.int32))
        return modular_clipping.modular_clip_by_value(x, low, high)

      # One row at a time: TFF's rounding seeds itself from the clock.
      shares = tf.map_fn(device, (rows, members), parallel_iterations=1,
                         fn_output_signature=tf.TensorSpec([padded],
                                                           tf.int32))
      total = tf.reduce_sum(tf.cast(shares, tf.int64), axis=0)
      return tf.cast(modular_clipping.modular_clip_by_value(total, low, high),
                     tf.int32)

    if self._members_only:
      encode = tff.tensorflow.computation(
          encode_fn, value_type, seed_type, tff.TensorType(np.float32))

      @tff.tensorflow.computation(value_type)
      def count_members(value):
        return tf.reduce_sum(tf.cast(value[1], tf.float32))

      def client_inputs(value, seed):  # with the round's masked devices,
        # which the server learns and announces
        count = tff.federated_sum(tff.federated_map(count_members, value))
        return (value, tff.federated_broadcast(seed),
                tff.federated_broadcast(count))
    else:
      encode = tff.tensorflow.computation(
          lambda value, seed: encode_fn(value, seed, None), value_type,
          seed_type)

      def client_inputs(value, seed):
        return value, tff.federated_broadcast(seed)

    @tff.tensorflow.computation(tff.TensorType(np.int32, [padded]), seed_type)
    def decode(total, seed):
      total, _, _ = query.get_noised_result(total,
                                            query.initial_global_state())
      x = _unrotate(discretization._undiscretize_struct(
          total, scale, tf.float32), seed)
      x = rotation._slice_and_reshape_to_template_spec(
          x, tf.TensorSpec([dim], tf.float32))
      return concat._unconcat_impl(x, row_specs)

    next_seed = rotation._build_next_global_seed_fn(stride=1)

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip((secure_sum.initialize(), tff.federated_eval(
          tff.tensorflow.computation(rotation._init_global_seed),
          tff.SERVER)))

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      inner, seed = state
      summed = secure_sum.next(inner, tff.federated_map(
          encode, client_inputs(value, seed)))
      return tff.templates.MeasuredProcessOutput(
          tff.federated_zip((summed.state,
                             tff.federated_map(next_seed, seed))),
          tff.federated_map(decode, (summed.result, seed)),
          summed.measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)
