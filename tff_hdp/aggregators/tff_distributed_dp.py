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
(milliseconds). So every reach into TFF's internal names is here, and
only here: a TFF upgrade that moves them, or changes the arithmetic,
fails this module's tests first.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import tensorflow_federated as tff
# pylint: disable=g-direct-tensorflow-import
from tensorflow_federated.python.aggregators import discretization
from tensorflow_federated.python.aggregators import distributed_dp
# pylint: enable=g-direct-tensorflow-import

from tff_hdp.privacy import distributed_noise

# The command line's names of TFF's mechanisms.
MECHANISMS = {'dgauss': 'distributed_dgauss', 'skellam': 'distributed_skellam'}


def sum_factory(mechanism: str, noise_multiplier: float,
                clients_per_round: int, bits: int, clip: float
                ) -> tff.aggregators.UnweightedAggregationFactory:
  """TFF's distributed-DP sum (`mechanism` 'dgauss' or 'skellam') at a
  fixed clip, its modular wrap as likely as `distributed_noise`'s bit
  check assumes.

  Raises:
    ValueError: TFF's own checks, e.g. `bits` too few for the clients.
  """
  if mechanism not in MECHANISMS:
    raise ValueError(f'mechanism must be one of {sorted(MECHANISMS)}, got '
                     f'{mechanism!r}.')
  return distributed_dp.DistributedDpSumFactory(
      noise_multiplier=noise_multiplier,
      expected_clients_per_round=int(clients_per_round), bits=int(bits),
      l2_clip=clip, modclip_prob=distributed_noise.MODCLIP_PROB,
      mechanism=MECHANISMS[mechanism])


def is_distributed(factory) -> bool:
  """Whether `factory` is TFF's distributed-DP sum."""
  return isinstance(factory, distributed_dp.DistributedDpSumFactory)


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
             bits: int, clip: float, dim: int) -> BuiltNoise:
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
      l2_norm_bound=clip, gamma=1.0 / scale, beta=0.0, dim=padded).numpy()
  l2 = (inflated + 1e-5) * scale
  l1 = (math.ceil(l2 * min(math.sqrt(padded), l2))
        if mechanism == 'skellam' else None)
  return BuiltNoise(float(np.float32(l2)),
                    None if l1 is None else float(l1),
                    float(np.float32(local * scale)), padded)
