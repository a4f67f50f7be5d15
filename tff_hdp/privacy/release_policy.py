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

import dataclasses
from typing import Sequence

from tff_hdp.privacy import dp_randomness
from tff_hdp.privacy.privacy_groups import PrivacyGroup

# Whether the printed epsilon covers an aggregator's measurement: always (a
# function of the noisy outputs and public quantities); only with adaptive
# clipping (the noisy clipped-fraction estimate; with a fixed norm it is
# exact); only for groups without a guarantee (a realized count of a
# private group is exact); never.
COVERED = 'covered'
COVERED_WITH_ADAPTIVE_CLIPPING = 'covered with adaptive clipping'
COVERED_FOR_NON_PRIVATE_GROUPS = 'covered for non-private groups'
NOT_COVERED = 'not covered'
COVERAGE = (COVERED, COVERED_WITH_ADAPTIVE_CLIPPING,
            COVERED_FOR_NON_PRIVATE_GROUPS, NOT_COVERED)


@dataclasses.dataclass(frozen=True)
class Measurement:
  """An aggregator measurement a run reports every round: `name` in the
  aggregator's measurements, its rounds.csv / TensorBoard `column` (with
  `per_group`, one per privacy group: `{group}` in it names the group, and
  the measurement holds one value per group), `kind` (int or float) and
  whether the printed epsilon covers it (`COVERAGE`). An algorithm's
  record declares its measurements; what is not covered is withheld by
  default (`withheld_columns`)."""

  name: str
  column: str
  kind: type = float
  per_group: bool = False
  covered: str = COVERED

  def __post_init__(self):
    if self.covered not in COVERAGE:
      raise ValueError(f'measurement {self.name!r}: coverage must be one of '
                       f'{COVERAGE}, got {self.covered!r}.')
    if self.per_group != ('{group}' in self.column):
      raise ValueError(f'measurement {self.name!r}: a per-group column names '
                       "'{group}', and only it.")
    if self.kind not in (int, float):
      raise ValueError(f'measurement {self.name!r}: kind must be int or '
                       'float.')
    if not self.per_group and self.covered == COVERED_FOR_NON_PRIVATE_GROUPS:
      raise ValueError(f'measurement {self.name!r}: coverage by group needs '
                       'a per-group measurement.')

  def columns(self, groups: Sequence[PrivacyGroup]) -> list[str]:
    """Its columns, one per group of `groups` if per group."""
    if not self.per_group:
      return [self.column]
    return [self.column.format(group=g.name) for g in groups]

  def withheld(self, groups: Sequence[PrivacyGroup],
               adaptive_clipping: bool) -> list[str]:
    """Those of its columns the printed epsilon does not cover."""
    if self.covered == COVERED or (
        self.covered == COVERED_WITH_ADAPTIVE_CLIPPING and adaptive_clipping):
      return []
    if self.covered == COVERED_FOR_NON_PRIVATE_GROUPS:
      return [self.column.format(group=g.name) for g in groups
              if g.is_private]
    return self.columns(groups)

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
# With Ditto and two or more private levels: each private level's clients'
# personalized accuracy, acc_l_level_<level>, and the worst of them; what
# private clients measure of their own data, as acc_l_p.
LEVEL_PERSONAL_PREFIX = 'acc_l_level_'
WORST_LEVEL_PERSONAL = 'acc_l_worst_level'


def is_private_client_metric(name: str) -> bool:
  """Whether metric `name` is a statistic of private clients' own data,
  which the printed epsilon does not cover."""
  return (name in PRIVATE_CLIENT_METRICS or name == WORST_LEVEL_PERSONAL or
          name.startswith(LEVEL_PERSONAL_PREFIX))
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


def withheld_columns(groups: Sequence[PrivacyGroup], adaptive_clipping: bool,
                     measurements: Sequence[Measurement]) -> frozenset[str]:
  """The per-round statistics of a trusted-setting run that the printed
  epsilon does not cover: what the clients measure of their own data, and
  the aggregator's `measurements` that their coverage withholds.

  `groups` are the groups a configuration trains with. Without adaptive
  clipping no count query is accounted, so a clipped fraction is exact.
  """
  withheld = {'num_clients', 'train_loss', 'train_accuracy',
              'num_non_finite_updates', *PRIVATE_CLIENT_METRICS}
  for m in measurements:
    withheld.update(m.withheld(groups, adaptive_clipping))
  return frozenset(withheld)
