"""Which statistics of a FedHDP run are released, and why epsilon covers each.

A round measures more than it may publish: the realized counts of private
clients, their training loss, and metrics on their local data are exact
functions of private data that no noise protects. By default `rounds.csv`,
the release managers (TensorBoard) and `summary.json` carry only what the
printed epsilon covers:

* the global model's metrics on the server's test set (post-processing of the
  DP model; the test set is evaluation data, not a client's);
* the clip norm and, with adaptive clipping, the noisy clipped-fraction
  estimate (post-processing of the accounted clip-count query);
* per group: combination weight, noise std and epsilon, functions of public
  group sizes, the clip norm and the opt-out group's count;
* non-private groups' counts and the metrics of clients who opted out (they
  chose no guarantee).

`withheld_columns` names the rest; `--release_unprotected_stats` releases it
anyway, announced by `UNPROTECTED_WARNING` in the run's header and summary.
"""

from __future__ import annotations

from typing import Sequence

from tff_hdp.privacy import dp_randomness
from tff_hdp.privacy.privacy_groups import PrivacyGroup

REALIZED_WARNING = (
    'NOTE: --denominator=realized divides private groups\' sums by their '
    'noise-free realized counts, which no accountant covers: no epsilon is '
    'reported ("not accounted").')
LARGE_DELTA_WARNING = (
    'WARNING: --unsafe_allow_large_delta: a group or client may have delta '
    '>= 1/N, which allows releasing someone\'s data outright.')
UNPROTECTED_WARNING = (
    'WARNING: --release_unprotected_stats: rounds.csv, TensorBoard and '
    'summary.json include statistics of private clients (realized counts, '
    'training loss and accuracy, metrics on their local test data and '
    'personal models) that the printed epsilon does NOT cover.')

# Metrics on the local data or personal models of clients who chose a private
# level: exact averages over them, withheld by default.
PRIVATE_CLIENT_METRICS = ('acc_g_p', 'var_g_p', 'delta_g', 'acc_l_p',
                          'var_l_p', 'delta_l')


def privacy_warnings(realized: bool = False, unprotected: bool = False,
                     seeded: bool = False,
                     large_delta: bool = False) -> list[str]:
  """One line per setting of a run (any setting: trusted, untrusted,
  cross-silo) under which the printed epsilon does not cover everything it
  releases; runs print them in their header and record them in summaries."""
  return [line for on, line in (
      (realized, REALIZED_WARNING), (unprotected, UNPROTECTED_WARNING),
      (seeded, dp_randomness.UNSAFE_SEEDED_WARNING),
      (large_delta, LARGE_DELTA_WARNING)) if on]


def withheld_columns(groups: Sequence[PrivacyGroup],
                     adaptive_clipping: bool) -> frozenset[str]:
  """The per-round statistics that the printed epsilon does not cover.

  `groups` are the groups a configuration trains with. Without adaptive
  clipping no count query is accounted, so the clipped fraction is exact.
  """
  withheld = {'num_clients', 'train_loss', 'train_accuracy',
              'num_non_finite_updates', *PRIVATE_CLIENT_METRICS}
  withheld |= {f'count_{g.name}' for g in groups if g.is_private}
  if not adaptive_clipping:
    withheld.add('fraction_clipped_estimate')
  return frozenset(withheld)
