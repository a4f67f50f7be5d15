"""The adapter to TFF's distributed-DP sum: the bit check the command line
makes before TensorFlow loads is TFF's own, and the numbers read from
TFF's build are the ones its DP query holds."""

import math

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
# The test reads TFF's rotation itself, apart from the adapter's copy.
from tensorflow_federated.python.aggregators import rotation

from tff_hdp.aggregators import tff_distributed_dp
from tff_hdp.privacy import distributed_noise

pytestmark = pytest.mark.tf


@pytest.mark.parametrize('clients', [1, 2, 3, 15, 16, 17, 20, 100, 1000,
                                     5000, 2**20])
def test_min_bits_is_the_least_width_tffs_factory_accepts(clients):
  """TFF refuses every width below `min_bits` and accepts it (both of its
  checks: 2^b >= n, and 2^(2b) >= n k^2)."""
  least = distributed_noise.min_bits(clients)
  for bits in range(1, 23):
    if bits < least:
      with pytest.raises(ValueError, match='bits'):
        tff_distributed_dp.sum_factory('dgauss', 1.0, clients, bits, 1.0)
    else:
      tff_distributed_dp.sum_factory('dgauss', 1.0, clients, bits, 1.0)


@pytest.mark.parametrize('mechanism', ['dgauss', 'skellam'])
def test_built_noise_is_the_dp_querys(mechanism):
  """z = 1, 20 clients, 16 bits, clip 0.5, 1001 parameters (DFT pads to
  1002): the local std is z S / sqrt(n) at TFF's scale s, the L2 bound the
  clip at that scale inflated by randomized rounding, (S + sqrt(d) / s +
  1e-5) s (Kairouz et al.'s Theorem 1 at beta = 0, with TFF's leeway), and
  Skellam's L1 bound ceil(Delta min(sqrt(d), Delta)) (none for the
  discrete Gaussian)."""
  built = tff_distributed_dp.built_noise(tff_distributed_dp.sum_factory(
      mechanism, 1.0, 20, 16, 0.5, 'unconditional'), 1001)
  assert built.dim == 1002
  scale = built.local_stddev * math.sqrt(20) / 0.5
  assert built.l2_sensitivity == pytest.approx(
      (0.5 + math.sqrt(1002) / scale + 1e-5) * scale, rel=1e-5)
  if mechanism == 'skellam':
    assert built.l1_sensitivity == math.ceil(
        built.l2_sensitivity * min(math.sqrt(1002), built.l2_sensitivity))
  else:
    assert built.l1_sensitivity is None


@pytest.mark.parametrize('bits,dim', [(16, 1001), (12, 20_001),
                                      (10, 20_001)])
def test_conditional_roundings_bound_is_kairouz_liu_steinkes(bits, dim):
  """The default, conditional rounding at beta = exp(-0.5): z = 1, 20
  clients, clip 0.5, step g = 1 / s at TFF's scale s, d the padded
  dimension: the L2 bound is min(S + sqrt(d) g, sqrt(S^2 + d g^2 / 4 +
  sqrt(2 log(1 / beta)) g (S + sqrt(d) g / 2))) (Kairouz et al., Theorem
  1 / Section 4), with TFF's 1e-5 leeway. Where rounding is coarse (10
  and 12 bits, 20,002 parameters) its inflation of the clip is under a
  fifth of the unconditional bound's, S + sqrt(d) g, at the same scale."""
  built = tff_distributed_dp.built_noise(tff_distributed_dp.sum_factory(
      'dgauss', 1.0, 20, bits, 0.5), dim)
  scale = built.local_stddev * math.sqrt(20) / 0.5
  g, d, clip = 1 / scale, built.dim, 0.5
  linear = clip + math.sqrt(d) * g
  squared = (clip**2 + d * g**2 / 4 +
             math.sqrt(2 * 0.5) * g * (clip + math.sqrt(d) * g / 2))
  assert built.l2_sensitivity == pytest.approx(
      (min(linear, math.sqrt(squared)) + 1e-5) * scale, rel=1e-5)
  if bits < 16:
    assert built.l2_sensitivity / scale - clip < (linear - clip) / 5


def test_an_unknown_mechanism_or_rounding_is_refused():
  with pytest.raises(ValueError, match="'conditional', 'unconditional'"):
    tff_distributed_dp.sum_factory('dgauss', 1.0, 20, 16, 0.5, 'floor')
  with pytest.raises(ValueError, match="'dgauss', 'skellam'"):
    tff_distributed_dp.sum_factory('laplace', 1.0, 20, 16, 0.5)


@pytest.mark.parametrize('rounding', ['conditional', 'unconditional'])
@pytest.mark.parametrize('mechanism', ['dgauss', 'skellam'])
@pytest.mark.parametrize('z,bits,clients,dim', [
    (1.0, 16, 20, 1001), (0.3, 12, 20, 650), (5.0, 20, 3, 7),
    (2.0, 8, 20, 100_000)])
def test_noise_at_is_what_the_build_holds(mechanism, z, bits, clients, dim,
                                          rounding):
  """The arithmetic a search probes gives, to the bit, what TFF's built
  process holds: at a large and a small scale, TFF's scale cap (3
  clients, 20 bits), and a scale below 1 (8 bits, 100,000 parameters),
  with either rounding."""
  assert tff_distributed_dp.noise_at(
      mechanism, z, clients, bits, 0.1, dim,
      rounding) == tff_distributed_dp.built_noise(
          tff_distributed_dp.sum_factory(mechanism, z, clients, bits, 0.1,
                                         rounding), dim)


class _ShownSum(tff.aggregators.UnweightedAggregationFactory):
  """A plain sum that also reports itself: what TFF's rotation hands the
  aggregation inside it."""

  def create(self, value_type):
    plain = tff.aggregators.SumFactory().create(value_type)

    @tff.federated_computation(plain.initialize.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      out = plain.next(state, value)
      return tff.templates.MeasuredProcessOutput(out.state, out.result,
                                                 out.result)

    return tff.templates.AggregationProcess(plain.initialize, next_fn)


def test_the_cohorts_rotation_is_tffs():
  """A cohort row's rotation (`_rotate`, TFF's client transform, which TFF
  exports nowhere) is what TFF's own DFT factory gives one client at the
  round's seed, and `_unrotate` undoes it: 11 parameters, padded to 12."""
  x = np.random.default_rng(3).normal(size=11).astype(np.float32)
  padded = np.append(x, 0).astype(np.float32)
  process = rotation.DiscreteFourierTransformFactory(_ShownSum()).create(
      tff.TensorType(np.float32, [11]))
  state = process.initialize()
  tffs = process.next(state, [x]).measurements['dft']
  seed = tf.constant(state[1])
  # pylint: disable-next=protected-access
  ours = tff_distributed_dp._rotate(tf.constant(padded), seed)
  np.testing.assert_allclose(ours, tffs, rtol=0, atol=1e-6)
  assert not np.allclose(ours, padded, atol=0.1)
  # pylint: disable-next=protected-access
  back = tff_distributed_dp._unrotate(ours, seed)
  np.testing.assert_allclose(back, padded, atol=1e-6)
