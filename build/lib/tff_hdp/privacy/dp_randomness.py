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


def run_seed(seed: int, seeded: bool, checkpoint=None) -> int:
  """The seed of a run's DP noise and sampling.

  `seed` itself when `seeded` (unsafe); otherwise the secret a
  `checkpointing.RunCheckpoint` keeps (a fresh one on a new run), or a fresh
  secret when the run keeps no checkpoint.
  """
  if seeded:
    return seed
  if checkpoint is not None:
    return checkpoint.dp_secret(fresh_secret)
  return fresh_secret()


def client_seeds(seed: int, seeded: bool, num_clients: int,
                 checkpoint=None) -> list[int]:
  """Each DP-SGD client's own seed (its noise, example sampling, private
  selections): from the run's secret, or from `seed` when `seeded`."""
  if seeded:
    return [seed * 100003 + i for i in range(num_clients)]
  secret = run_seed(seed, False, checkpoint)
  return [int(np.random.default_rng([secret, i, 0xD5]).integers(2**62))
          for i in range(num_clients)]
