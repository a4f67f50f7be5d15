"""Where the randomness a DP guarantee rests on comes from.

The accountant's epsilon assumes that nobody but the run knows the Gaussian
noise or which clients (or examples) were sampled: noise drawn from a public
seed can be subtracted from the release, and a public sample removes the
amplification by subsampling that the accountant credits. So by default each
run draws a secret seed from the operating system's entropy, derives its DP
noise and its privacy-relevant sampling from it, and keeps it only in its
private state (the checkpoint, so that a resumed run equals an uninterrupted
one bit for bit). `--seed` keeps every public choice: data order, initial
weights, which clients opt out, the clients' epsilons.

`seeded=True` derives that randomness from the public seed instead, so that
experiments repeat exactly; the printed epsilon then no longer holds, which
the run announces (`UNSAFE_SEEDED_WARNING`).
"""

from __future__ import annotations

import secrets

import numpy as np

UNSAFE_SEEDED_WARNING = (
    'WARNING: --unsafe_seeded_dp_randomness: the DP noise and the sampling '
    'follow --seed, so anyone who knows the seed can remove the noise; the '
    'printed epsilon does NOT hold for this run.')


def fresh_secret() -> int:
  """A 63-bit secret seed from the operating system's entropy."""
  return secrets.randbits(63)


def client_secret(run_secret: int, client_index: int) -> int:
  """A client's own secret seed (e.g. its DP-SGD noise), from the run's."""
  return int(np.random.default_rng([run_secret, client_index, 0xD5]).integers(
      2**62))
