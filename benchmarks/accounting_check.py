"""The accountant's numbers for the papers' settings, checked independently.

For each setting: the z_j that `tff_hdp.privacy.accounting` calibrates, the epsilon it
reports for that z_j, the epsilon of dp_accounting called here directly on
the closed-form z_eff = (z_j^-2 + (2 z_b)^-2)^-1/2 (Poisson: add/remove-one,
multiplier z_eff; fixed size: replace-one, multiplier z_eff / 2), and, when
every client joins every round, the exact epsilon of the Gaussian mechanism
(mu-GDP, mu = sqrt(T) 2 / z_eff), which the reported epsilon must not be
below.

Then the run's per-round epsilon column (rounds.csv): the time to account
rounds 1..500 of the MNIST setting with the ledger (one RDP curve per group,
scaled per round) and with dp_accounting composing every round count from
scratch, and the largest difference between the two.

  .venv/bin/python benchmarks/accounting_check.py
"""

from __future__ import annotations

import math
import os
import sys
import time

import dp_accounting
from dp_accounting import rdp
from dp_accounting.pld import privacy_loss_mechanism
from scipy import optimize

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tff_hdp.privacy import accounting  # noqa: E402

# (name, sampling, rounds, epsilon, delta, z_b, z_j or None to calibrate).
# z_b is 5% of the expected clients per round. The last row is the z_j that
# the old (unhalved) fixed-size event calibrated for (3.6, 1e-4) at z_b = 5.
_SETTINGS = (
    ('MNIST', accounting.PoissonSampling(0.05), 500, 3.6, 1e-4, 5.0, None),
    ('FMNIST', accounting.PoissonSampling(100 / 3383), 500, 0.6, 1e-4, 5.0,
     None),
    ('FEMNIST', accounting.PoissonSampling(100 / 3400), 500, 4.1, 1e-4, 5.0,
     None),
    ('MNIST', accounting.FixedSizeSampling(2000, 100), 500, 3.6, 1e-4, 5.0,
     None),
    ('all 100 clients', accounting.FixedSizeSampling(100, 100), 20, 3.6, 1e-4,
     5.0, None),
    ('all 100 clients', accounting.FixedSizeSampling(100, 100), 20, 3.6, 1e-4,
     10.0, None),
    ('all 100 clients, old z_j', accounting.FixedSizeSampling(100, 100), 20,
     3.6, 1e-4, 5.0, 5.8933),
)


def direct_epsilon(z, z_b, sampling, rounds, delta):
  """dp_accounting on the closed-form z_eff, without tff_hdp's event code."""
  z_eff = (z**-2 + (2 * z_b)**-2)**-0.5
  if isinstance(sampling, accounting.PoissonSampling):
    acc = rdp.RdpAccountant()
    event = dp_accounting.PoissonSampledDpEvent(
        sampling.q, dp_accounting.GaussianDpEvent(z_eff))
  else:
    acc = rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        sampling.population, sampling.clients_per_round,
        dp_accounting.GaussianDpEvent(z_eff / 2))
  acc.compose(dp_accounting.SelfComposedDpEvent(event, rounds))
  return acc.get_epsilon(delta)


def gaussian_dp_epsilon(mu, delta):
  """Exact epsilon of mu-GDP at delta: that of one Gaussian of sensitivity
  mu at unit noise, whose delta(epsilon) dp_accounting gives in closed form
  (the tests' own formula, Dong, Roth & Su 2019, Cor. 2.13, agrees)."""
  loss = privacy_loss_mechanism.GaussianPrivacyLoss(1.0, sensitivity=mu)
  return optimize.brentq(lambda eps: loss.get_delta_for_epsilon(eps) - delta,
                         0.0, 500.0, xtol=1e-12)


def _sampling_text(sampling):
  if isinstance(sampling, accounting.PoissonSampling):
    return f'Poisson q={sampling.q:.4g}'
  return f'fixed {sampling.clients_per_round} of {sampling.population}'


def main():
  print('| setting | sampling | T | target (eps, delta) | z_b | z_j | '
        'eps (tool) | eps (dp_accounting direct) | eps (exact, mu-GDP) |')
  print('|---|---|---|---|---|---|---|---|---|')
  for name, sampling, rounds, eps, delta, z_b, z in _SETTINGS:
    head = (f'| {name} | {_sampling_text(sampling)} | {rounds} | '
            f'({eps}, {delta:g}) | {z_b:g} |')
    if z is None:
      try:
        z = accounting.calibrate_noise_multiplier(eps, delta, sampling, rounds,
                                                  z_b)
      except accounting.InfeasiblePrivacyTargetError:
        best = direct_epsilon(math.inf, z_b, sampling, rounds, delta)
        print(f'{head} infeasible: even z_j = inf spends {best:.4f} | | | |')
        continue
    tool = accounting.epsilon_spent(z, z_b, sampling, rounds, delta)
    direct = direct_epsilon(z, z_b, sampling, rounds, delta)
    exact = ''
    if sampling.rate == 1:
      z_eff = (z**-2 + (2 * z_b)**-2)**-0.5
      exact = f'{gaussian_dp_epsilon(math.sqrt(rounds) * 2 / z_eff, delta):.4f}'
    print(f'{head} {z:.4f} | {tool:.4f} | {direct:.4f} | {exact} |')
  _per_round_column()


def _per_round_column(rounds: int = 500, z_b: float = 5.0):
  """Times the epsilon of every round, as a run's rounds.csv reports it."""
  sampling, delta = accounting.PoissonSampling(0.05), 1e-4
  z = accounting.calibrate_noise_multiplier(3.6, delta, sampling, rounds, z_b)
  start = time.perf_counter()
  ledger = accounting.PrivacyLedger(
      [accounting.GroupBudget('p', z, 3.6, delta)], sampling, z_b)
  tool = [ledger.epsilon(0, r) for r in range(1, rounds + 1)]
  tool_seconds = time.perf_counter() - start
  start = time.perf_counter()
  direct = [direct_epsilon(z, z_b, sampling, r, delta)
            for r in range(1, rounds + 1)]
  direct_seconds = time.perf_counter() - start
  gap = max(abs(a - b) for a, b in zip(tool, direct))
  print(f'\nepsilon after each of rounds 1..{rounds} (MNIST, z_j = {z:.4f}):'
        f' ledger {tool_seconds:.2f} s, dp_accounting from scratch '
        f'{direct_seconds:.1f} s, largest difference {gap:.2g}')


if __name__ == '__main__':
  main()
