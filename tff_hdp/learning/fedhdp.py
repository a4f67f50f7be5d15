"""FedHDP / FeO2 learning processes and their privacy plan.

`plan_privacy` calibrates each private group's noise multiplier from its
(epsilon, delta) target, and `build_fedhdp` composes the learning process
(broadcast, local SGD, group-wise DP aggregation, server optimizer) with
`tff.learning.templates.compose_learning_process`. DP-FedAvg and non-private
FedAvg are the same process with one private or one non-private group.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np
import tensorflow_federated as tff

from tff_hdp.privacy import accounting
from tff_hdp.learning import client_work as client_work_lib
from tff_hdp.learning import algorithms
from tff_hdp.learning import learning_process
from tff_hdp.privacy.privacy_groups import GroupAssignment
from tff_hdp.privacy.privacy_groups import PrivacyGroup


@dataclasses.dataclass(frozen=True)
class ClipSettings:
  """Adaptive clipping of Andrew et al.; `learning_rate=0` fixes the norm.

  `count_stddev` is z_b, the noise std on the count of unclipped clients;
  `None` means TFF's default of 5% of the expected clients per round.
  """

  initial_norm: float = 0.1
  target_quantile: float = 0.5
  learning_rate: float = 0.2
  count_stddev: float | None = None


@dataclasses.dataclass(frozen=True)
class PrivacyPlan:
  """Everything the aggregator and the ledger need, derived once per run."""

  assignment: GroupAssignment
  sampling: accounting.Sampling
  rounds: int
  noise_multipliers: tuple[float, ...]
  clip_count_stddev: float
  expected_group_sizes: tuple[float | None, ...]
  expected_clients_per_round: float | None
  ledger: accounting.PrivacyLedger

  @property
  def accounted(self) -> bool:
    """Whether the ledger's epsilon covers the released model. Realized
    denominators divide by noise-free counts of private clients (adding one
    client with a zero update rescales the output), which no event models."""
    return self.expected_clients_per_round is not None

  @property
  def adaptive_clipping(self) -> bool:
    """Whether the clip norm follows the (accounted) noisy clip count."""
    return self.ledger.clip_count_stddev is not None


def plan_privacy(assignment: GroupAssignment, sampling: accounting.Sampling,
                 rounds: int, clip: ClipSettings,
                 denominator: str = 'expected',
                 allow_large_delta: bool = False) -> PrivacyPlan:
  """Calibrates z_j per private group for `rounds` rounds of `sampling`.

  `denominator='expected'` divides each private group's noisy sum by its
  expected size q N_j and the clip count by q N (the privacy-sound TF Privacy
  convention); 'realized' uses the round's counts as the paper writes them.
  Non-private groups always use their realized count. A private group's
  delta must be below 1/N_j unless `allow_large_delta` (experiments only).
  """
  if denominator not in ('expected', 'realized'):
    raise ValueError(
        f"denominator must be 'expected' or 'realized', got {denominator!r}.")
  sizes = assignment.group_sizes()
  population = int(sizes.sum())
  if isinstance(sampling, accounting.FixedSizeSampling):
    if sampling.population != population:
      raise ValueError(
          f'sampling population {sampling.population} differs from the '
          f'{population} clients assigned to privacy groups.')
  q = sampling.rate
  any_private = any(g.is_private for g in assignment.groups)
  adaptive = clip.learning_rate > 0
  count_stddev = clip.count_stddev
  if count_stddev is None:
    count_stddev = 0.05 * q * population if (any_private and adaptive) else 0.0
  accounted_count_stddev = count_stddev if adaptive else None
  budgets = []
  multipliers = []
  expected = []
  for j, group in enumerate(assignment.groups):
    if group.is_private:
      if sizes[j] == 0:
        raise ValueError(f'privacy group {group.name!r} has no clients.')
      accounting.check_delta(group.delta, int(sizes[j]),
                             f'privacy group {group.name!r}',
                             allow_large_delta)
      z = accounting.calibrate_noise_multiplier(
          group.epsilon, group.delta, sampling, rounds, accounted_count_stddev)
      budgets.append(
          accounting.GroupBudget(group.name, z, group.epsilon, group.delta))
      multipliers.append(z)
      expected.append(q * sizes[j] if denominator == 'expected' else None)
    else:
      budgets.append(None)
      multipliers.append(0.0)
      expected.append(None)
  ledger = accounting.PrivacyLedger(budgets, sampling, accounted_count_stddev)
  return PrivacyPlan(
      assignment=assignment,
      sampling=sampling,
      rounds=rounds,
      noise_multipliers=tuple(multipliers),
      clip_count_stddev=count_stddev,
      expected_group_sizes=tuple(expected),
      expected_clients_per_round=(q * population if denominator == 'expected'
                                  else None),
      ledger=ledger)


def build_fedhdp(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    aggregator: tff.aggregators.WeightedAggregationFactory,
    num_groups: int,
    client_optimizer: tff.learning.optimizers.Optimizer,
    server_optimizer: tff.learning.optimizers.Optimizer | None = None,
    local_epochs: int = 1) -> tff.learning.templates.LearningProcess:
  """FedHDP as a TFF `LearningProcess`.

  `aggregator` receives each client's model delta weighted by its one-hot
  privacy-group vector; any `WeightedAggregationFactory` accepting that weight
  can be plugged in. The server applies the aggregate with `server_optimizer`
  (SGD with learning rate 1, i.e. theta <- theta + Delta, by default).
  """
  return learning_process.compose(
      model_fn,
      client_work_lib.build_group_client_work(model_fn, client_optimizer,
                                              num_groups, local_epochs),
      aggregator, tff.TensorType(np.float32, [num_groups]), server_optimizer)



def groups_for_algorithm(algorithm: str, assignment: GroupAssignment,
                         ratios: Sequence[float] | None = None
                         ) -> GroupAssignment:
  """The privacy groups each compared algorithm trains with.

  * fedhdp: the clients' own groups, with ratios r_j;
  * dp_fedavg: everyone in one private group at the strictest target;
  * nonprivate: everyone in one non-private group.
  """
  if algorithms.find(algorithm, algorithms.TRUSTED) is None:
    raise ValueError(f'unknown algorithm {algorithm!r}; choose one of '
                     f'{algorithms.names(algorithms.TRUSTED)}.')
  everyone = {c: 0 for c in assignment.client_groups}
  if algorithm == 'nonprivate':
    return GroupAssignment((PrivacyGroup('all_non_private'),), everyone)
  if algorithm == 'dp_fedavg':
    private = [g for g in assignment.groups if g.is_private]
    if not private:
      raise ValueError('dp_fedavg needs at least one private group.')
    strict = min(private, key=lambda g: (g.epsilon, g.delta))
    return GroupAssignment((PrivacyGroup(
        'all_private', strict.epsilon, min(g.delta for g in private)),),
                           everyone)
  if ratios is None:
    return assignment
  if len(ratios) != assignment.num_groups:
    raise ValueError(f'{len(ratios)} ratios given for '
                     f'{assignment.num_groups} privacy groups.')
  groups = tuple(
      dataclasses.replace(g, ratio=r) for g, r in zip(assignment.groups, ratios))
  return GroupAssignment(groups, assignment.client_groups)
