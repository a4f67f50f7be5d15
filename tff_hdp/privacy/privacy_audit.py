"""Statistics of an empirical privacy audit by membership inference.

An (eps, delta)-DP mechanism bounds every membership test: TPR <= e^eps FPR +
delta (and the same with the roles of members and non-members swapped). From
attack scores of known members and non-members, each threshold gives
Clopper-Pearson confidence intervals on TPR and FPR; the largest eps that the
worst-case ends of those intervals still imply is a lower bound on the true
epsilon that holds with the stated confidence. A private group whose lower
bound exceeds its accounted epsilon would be a privacy bug.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import stats


def clopper_pearson(successes: int, trials: int,
                    alpha: float) -> tuple[float, float]:
  """Two-sided (1 - alpha) exact binomial confidence interval."""
  lo = 0.0 if successes == 0 else stats.beta.ppf(alpha / 2, successes,
                                                 trials - successes + 1)
  hi = 1.0 if successes == trials else stats.beta.ppf(1 - alpha / 2,
                                                      successes + 1,
                                                      trials - successes)
  return float(lo), float(hi)


def auc(member_scores, non_member_scores) -> float:
  """P(member score > non-member score), ties counting one half."""
  m = np.asarray(member_scores, np.float64)[:, None]
  n = np.asarray(non_member_scores, np.float64)[None, :]
  return float(np.mean((m > n) + 0.5 * (m == n)))


@dataclasses.dataclass(frozen=True)
class AuditResult:
  auc: float
  best_advantage: float          # max over thresholds of TPR - FPR
  epsilon_lower_bound: float     # at confidence 1 - alpha, 0 if none
  members: int
  non_members: int


def audit(member_scores, non_member_scores, delta: float,
          alpha: float = 0.05) -> AuditResult:
  """Attack quality and the epsilon lower bound it certifies.

  A higher score means "member". Both directions of the DP inequality are
  used, so a test that flags non-members counts too.
  """
  members = np.asarray(member_scores, np.float64)
  non_members = np.asarray(non_member_scores, np.float64)
  n_m, n_n = len(members), len(non_members)
  if n_m == 0 or n_n == 0:
    raise ValueError('an audit needs both members and non-members.')
  thresholds = np.unique(np.concatenate([members, non_members]))
  best_eps, best_adv = 0.0, 0.0
  for t in thresholds:
    tp = int(np.sum(members >= t))
    fp = int(np.sum(non_members >= t))
    best_adv = max(best_adv, tp / n_m - fp / n_n)
    tpr_lo, _ = clopper_pearson(tp, n_m, alpha)
    _, fpr_hi = clopper_pearson(fp, n_n, alpha)
    # Swapped roles: the non-members' miss rate against the members'.
    tnr_lo, _ = clopper_pearson(n_n - fp, n_n, alpha)
    _, fnr_hi = clopper_pearson(n_m - tp, n_m, alpha)
    for num, den in ((tpr_lo, fpr_hi), (tnr_lo, fnr_hi)):
      if num - delta > 0 and den > 0:
        best_eps = max(best_eps, math.log((num - delta) / den))
  return AuditResult(auc(members, non_members), best_adv, best_eps, n_m, n_n)
