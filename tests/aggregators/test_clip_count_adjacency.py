"""Adaptive clipping's count under the adjacency each setting states.

The ledger gives the clip count sensitivity 1/2: `accounting.
effective_noise_multiplier` composes it as a Gaussian of noise 2 z_b per
unit, and `min_separation` (devices, no sampling) charges each
participation mu^2 = 1 / (2 z_b)^2. One device's answers are fed to the
real factory, noise off, in three worlds: its update (clipped, or not), the
same device zeroed out (zero-out adjacency, `--sampling=device`), and the
device absent (add/remove adjacency, Poisson sampling). The count must move
by no more than that sensitivity between any two of them.
"""

import math

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_hdp.aggregators import CohortHeterogeneousDPFactory
from tff_hdp.aggregators import HeterogeneousDPFactory
from tff_hdp.privacy import accounting
from tff_hdp.privacy import min_separation as ms

pytestmark = pytest.mark.tf

EXPECTED = 10.0  # the count's fixed denominator: no clamping at 0 or 1
CLIP = 1.0
OTHERS = [np.array([0.3, 0.0, 0.4], np.float32),  # unclipped
          np.array([6.0, 0.0, 8.0], np.float32)]  # clipped


def _ledger_sensitivities():
  """The count's sensitivity as each ledger charges it, per unit of z_b."""
  z_b = 3.0
  # Sampled settings: the count joins the sum's noise z as z_eff, so
  # z_eff^-2 = z^-2 + (sensitivity / z_b)^2.
  z = 5.0
  z_eff = accounting.effective_noise_multiplier(z, z_b)
  sampled = z_b * math.sqrt(z_eff ** -2 - z ** -2)
  # Devices: each participation answers once, mu^2 = (sensitivity / z_b)^2.
  one = ms.MinSeparation(rounds=1, min_separation=1, max_participations=1)
  device = z_b * math.sqrt(
      ms.device_mu(one, 1.0, 1e9, z_b) ** 2 - (1 / 1e9) ** 2)
  return sampled, device


def _count(values, factory_class):
  """The noise-free centred count of unclipped updates the factory uses."""
  factory = factory_class([0.0], [1.0], [None], initial_clip_norm=CLIP,
                          target_unclipped_quantile=0.5,
                          clip_learning_rate=0.1, clip_count_stddev=0.0,
                          expected_clients_per_round=EXPECTED)
  value_type = tff.TensorType(np.float32, [3])
  if factory_class is CohortHeterogeneousDPFactory:  # one TFF client, K rows
    process = factory.create(tff.TensorType(np.float32, [None, 3]),
                             tff.TensorType(np.float32, [None, 1]))
    out = process.next(process.initialize(), [np.stack(values)],
                       [np.ones([len(values), 1], np.float32)])
  else:
    process = factory.create(value_type, tff.TensorType(np.float32, [1]))
    out = process.next(process.initialize(), values,
                       [np.ones(1, np.float32)] * len(values))
  fraction = float(out.measurements['unclipped_fraction_estimate'])
  assert 0.0 < fraction < 1.0  # not clamped, so the count can be read back
  return (fraction - 0.5) * EXPECTED


def test_the_ledgers_charge_the_count_sensitivity_one_half():
  sampled, device = _ledger_sensitivities()
  assert sampled == pytest.approx(0.5, rel=1e-6)
  assert device == pytest.approx(0.5, rel=1e-6)


@pytest.mark.parametrize('factory_class', [HeterogeneousDPFactory,
                                           CohortHeterogeneousDPFactory])
@pytest.mark.parametrize('norm', [10.0, 0.5], ids=['clipped', 'unclipped'])
def test_zeroing_or_removing_a_device_moves_the_count_by_its_sensitivity(
    factory_class, norm):
  device = np.array([norm, 0.0, 0.0], np.float32)
  present = _count(OTHERS + [device], factory_class)
  zeroed = _count(OTHERS + [np.zeros(3, np.float32)], factory_class)
  absent = _count(OTHERS, factory_class)
  sensitivity = max(_ledger_sensitivities())
  # The device answers +-1/2; zeroed out or absent it answers nothing.
  assert present - absent == pytest.approx(0.5 if norm < CLIP else -0.5)
  assert zeroed == pytest.approx(absent)
  for a, b in [(present, zeroed), (present, absent), (zeroed, absent)]:
    assert abs(a - b) <= sensitivity + 1e-6
