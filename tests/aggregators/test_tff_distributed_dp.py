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
      mechanism, 1.0, 20, 16, 0.5), 1001)
  assert built.dim == 1002
  scale = built.local_stddev * math.sqrt(20) / 0.5
  assert built.l2_sensitivity == pytest.approx(
      (0.5 + math.sqrt(1002) / scale + 1e-5) * scale, rel=1e-5)
  if mechanism == 'skellam':
    assert built.l1_sensitivity == math.ceil(
        built.l2_sensitivity * min(math.sqrt(1002), built.l2_sensitivity))
  else:
    assert built.l1_sensitivity is None


def test_an_unknown_mechanism_is_refused():
  with pytest.raises(ValueError, match="'dgauss', 'skellam'"):
    tff_distributed_dp.sum_factory('laplace', 1.0, 20, 16, 0.5)


@pytest.mark.parametrize('mechanism', ['dgauss', 'skellam'])
@pytest.mark.parametrize('z,bits,clients,dim', [
    (1.0, 16, 20, 1001), (0.3, 12, 20, 650), (5.0, 20, 3, 7),
    (2.0, 8, 20, 100_000)])
def test_noise_at_is_what_the_build_holds(mechanism, z, bits, clients, dim):
  """The arithmetic a search probes gives, to the bit, what TFF's built
  process holds: at a large and a small scale, TFF's scale cap (3
  clients, 20 bits), and a scale below 1 (8 bits, 100,000 parameters)."""
  assert tff_distributed_dp.noise_at(
      mechanism, z, clients, bits, 0.1, dim) == tff_distributed_dp.built_noise(
          tff_distributed_dp.sum_factory(mechanism, z, clients, bits, 0.1),
          dim)


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
