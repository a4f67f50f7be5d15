"""Who takes part in a round, and the order in which clients read their data.

Client sampling is drawn from `(sampling seed, round)` alone, so a round can
be re-drawn without replaying the ones before it; the sampling seed is the
run's secret (`tff_hdp.privacy.dp_randomness`), because the accountant's
amplification by subsampling assumes nobody knows who took part.

The example order follows the run's public `--seed`. Two derivations exist
because the settings' published runs used them: sampled clients (the trusted
setting) get one seed per position in the round, while settings where every
client takes part every round (untrusted server, cross-silo) get one per round.

A simulated dropout (`--simulate_dropout`) follows the public seed too: the
server sees which devices fail to send, so which did is no secret.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

from tff_hdp.privacy import accounting


def sample_clients(client_ids: Sequence[Hashable],
                   sampling: accounting.Sampling, seed: int,
                   round_num: int,
                   client_rates: np.ndarray | None = None) -> list[Hashable]:
  """The clients of round `round_num`, as the accountant assumes them drawn;
  with `client_rates` (Poisson only), each client at its own rate (its
  group's, individualized sampling) from the same draws."""
  rng = np.random.default_rng([seed, round_num, 0x5A])
  n = len(client_ids)
  if client_rates is not None:
    if not isinstance(sampling, accounting.PoissonSampling):
      raise ValueError('clients at their own rates are Poisson-sampled.')
    chosen = np.flatnonzero(rng.random(n) < client_rates)
  elif isinstance(sampling, accounting.PoissonSampling):
    chosen = np.flatnonzero(rng.random(n) < sampling.q)
  else:
    chosen = np.sort(rng.choice(n, sampling.clients_per_round, replace=False))
  return [client_ids[i] for i in chosen]


def sampled_client_order_seed(seed: int, round_num: int, position: int) -> int:
  """The data-order seed of the `position`-th sampled client of a round."""
  return int(np.random.default_rng([seed, round_num, position]).integers(2**31))


def every_client_order_seed(seed: int, round_num: int) -> int:
  """The data-order seed of round `round_num` when every client takes part."""
  return seed * 100003 + round_num


def finishing(seed: int, round_num: int, devices: int,
              dropout: float) -> np.ndarray:
  """Which of round `round_num`'s `devices` devices (by position) send
  their update, each failing to with probability `dropout`."""
  if not 0 <= dropout < 1:
    raise ValueError(f'dropout must be in [0, 1), got {dropout}.')
  return np.random.default_rng([seed, round_num, 0xD0]).random(
      devices) >= dropout
