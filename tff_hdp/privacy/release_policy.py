"""Which statistics a run releases, and why its printed epsilon covers each.

One rule in every setting: by default a run releases only functions of the
accounted mechanisms' outputs (the DP model and noisy updates, noisy counts,
private selections) and of public data (flags, sizes, declared choices, and
data declared evaluation data). Whatever else a round measures is exact in
private data that no noise protects: it is withheld, and
`--release_unprotected_stats` releases it anyway, announced by
`UNPROTECTED_WARNING` in the run's header and summary. Per setting, covered:

* trusted server (the unit is a whole client, its local test split
  included): the global model's metrics on the server's test set; the clip
  norm and, with adaptive clipping, the noisy clipped-fraction estimate; per
  group its combination weight, noise std and epsilon (functions of public
  group sizes, the clip norm and the opt-out count); the opt-out group's
  count and its clients' metrics (they chose no guarantee). Withheld:
  `withheld_columns`.
* untrusted server (the unit is one training example of client i, and each
  client is a person whose local data, test split too, is what the
  guarantee is for): Acc_g on the server's test set, each client's epsilon
  (public budgets and settings), and the aggregator's measurements, which
  read only the DP-SGD updates. Withheld: the metrics on the clients' local
  test splits (`UNTRUSTED_UNPROTECTED_METRICS`), exact averages over data no
  epsilon covers, which the clients would report to the very server the
  setting distrusts.
* cross-silo (the unit is one training example of silo k): the silos' test
  splits are declared evaluation data, as in the MR-MTL paper, whose
  headline metric is each silo's score on its own split with the model it
  deploys, averaged with the splits' sizes as weights. That metric is
  post-processing of the silos' DP models with the splits fixed, so eps_k
  covers it for every training example; the test examples themselves are
  not protected by any epsilon (a silo that cannot have its split scored
  must hold out another). Also covered: the non-finite update count (a test
  on the noisy updates) and the clusters (IFCA's private selections).
  Nothing is withheld.

Wall-clock `seconds` is outside every guarantee, as timing is for DP
training in general: it is released as an operational figure (README,
"Privacy model").
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
# The untrusted setting's evaluation: Acc_g on the server's test set is
# covered; its clients, all private, are scored on their local test splits
# (Acc_g,p and its variance) only with --release_unprotected_stats.
UNTRUSTED_METRICS = ('acc_g',)
UNTRUSTED_UNPROTECTED_METRICS = ('acc_g_p', 'var_g_p')


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


def untrusted_metrics(release_unprotected: bool) -> tuple[str, ...]:
  """The metrics an untrusted-setting run reports each evaluation."""
  return UNTRUSTED_METRICS + (UNTRUSTED_UNPROTECTED_METRICS
                              if release_unprotected else ())


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
