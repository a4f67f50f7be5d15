"""The public seams of a trusted rule whose noise is correlated over rounds
(without sampling, `tff_hdp.privacy.min_separation`), and the check that
its factory applies the noise its plan accounts.

A rule's `privacy_plan` names the strategy its epsilon is accounted under
(`device_plan(blt_strategy)`, `device_plan(tree_strategy)`, ...); its
factory builds one stream per privacy group (`per_group_streams`,
`correlated_stream` for a private group, `plain_stream` for a group without
guarantee). The ledger accounts the plan's strategy, so a factory that
applied another would print an epsilon that does not bound what it
releases: `check_applied_noise` refuses it at build, for the built-in rules
and for a rule from user code alike, from what the factory itself says it
applies (`noise_strategies`), not from what the rule declares.

Nothing here imports TensorFlow at module level: the command line reads
the records (and their plans' marks) before TensorFlow loads.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, TYPE_CHECKING

if TYPE_CHECKING:
  import tensorflow_federated as tff
  from tff_hdp.privacy import plans

# Why a `device_only` record refuses any other sampling.
DEVICE_ONLY = ('correlated noise is accounted without sampling, for devices '
               'that enforce their own participation: run it with '
               '--sampling=device (with --min_separation and '
               '--max_participations).')


def device_plan(noise: Callable[..., Any]) -> Callable[..., Any]:
  """A `privacy_plan` without sampling: `plans.plan_privacy` with each
  private group's sums under the strategy `noise(model)` for the run's
  participation model (`min_separation.DeviceParticipation`). Marked
  `device_only`, so the command line refuses other sampling before
  TensorFlow loads, and the run checks that the factory applies that
  strategy (`check_applied_noise`)."""

  def plan(assignment, sampling, rounds, *args, **kwargs):
    # pylint: disable=g-import-not-at-top
    from tff_hdp.privacy import min_separation
    from tff_hdp.privacy.plans import plan_privacy
    # pylint: enable=g-import-not-at-top
    if not isinstance(sampling, min_separation.DeviceParticipation):
      raise ValueError(DEVICE_ONLY)
    return plan_privacy(
        assignment, dataclasses.replace(
            sampling, noise=noise(sampling.model(rounds))), rounds, *args,
        **kwargs)

  plan.device_only = True
  return plan


def blt_strategy(model):
  """BLT's Toeplitz strategy for `model` (`blt.parameters_for`)."""
  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import blt
  from tff_hdp.privacy import min_separation
  # pylint: enable=g-import-not-at-top
  return min_separation.ToeplitzNoise(tuple(
      blt.parameters_for(model).coefficients(model.rounds)))


def tree_strategy(model):
  """The online binary tree's strategy (for any `model`)."""
  del model
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy import min_separation
  return min_separation.TreeNoise()


def independent_strategy(model):
  """Fresh noise every round (for any `model`)."""
  del model
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy import min_separation
  return min_separation.IndependentNoise()


def per_group_streams(cohorts: bool):
  """`PerGroupStreamsFactory`, or its cohort twin (whose streams get sums
  of rows it clipped itself)."""
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.aggregators import per_group_streams as streams
  return (streams.CohortPerGroupStreamsFactory if cohorts
          else streams.PerGroupStreamsFactory)


def plain_stream(clip: float, cohorts: bool):
  """A group without guarantee's stream: a clipped sum (in cohorts the rows
  arrive clipped)."""
  # pylint: disable-next=g-import-not-at-top
  import tensorflow_federated as tff
  if cohorts:
    return tff.aggregators.SumFactory()
  return tff.aggregators.clipping_factory(clip, tff.aggregators.SumFactory())


def correlated_stream(plan: plans.PrivacyPlan, noise_multiplier: float,
                      clip: float, seed: int, cohorts: bool):
  """A private group's stream adding the correlated noise `plan` accounts
  (its sampling's `noise`) at `noise_multiplier`: BLT's buffers for BLT's
  Toeplitz strategy (`blt_strategy`), TFF's efficient tree for the tree's.
  In cohorts the rows arrive clipped (`clip_updates=False`).

  Raises:
    ValueError: the plan accounts a strategy no stream here applies.
  """
  # pylint: disable=g-import-not-at-top
  from tff_hdp.aggregators import blt_noise
  from tff_hdp.aggregators import tree_noise
  from tff_hdp.privacy import blt
  from tff_hdp.privacy import min_separation
  # pylint: enable=g-import-not-at-top
  strategy = plan.sampling.noise
  if isinstance(strategy, min_separation.TreeNoise):
    return tree_noise.TreeSumFactory(noise_multiplier, clip, seed,
                                     clip_updates=not cohorts)
  if isinstance(strategy, min_separation.ToeplitzNoise):
    return blt_noise.BltSumFactory(
        blt.parameters_for(plan.sampling.model(plan.rounds)),
        noise_multiplier, clip, seed, clip_updates=not cohorts)
  raise ValueError(f'no correlated stream applies {type(strategy).__name__}; '
                   'build the group\'s stream yourself and say its strategy '
                   '(noise_strategy).')


def _described(strategy, other) -> str:
  """`strategy` in a refusal, set apart from `other` of the same type."""
  if strategy is None:
    return 'no noise it names (no noise_strategy)'
  name = type(strategy).__name__
  if other is not None and type(other) is type(strategy):
    return f'{name} (other coefficients)'
  return name


def check_applied_noise(name: str, plan: plans.PrivacyPlan,
                        factory: tff.aggregators.Factory) -> None:
  """ValueError naming algorithm `name` unless `factory` applies to each of
  `plan`'s private groups the strategy the plan accounts (its sampling's
  `noise`), as the factory says: `factory.noise_strategies(rounds)`, one
  `min_separation` strategy (or None: no noise) per privacy group, which
  `PerGroupStreamsFactory` and `MergedGroupsFactory` read from their
  streams' `noise_strategy(rounds)`. A factory that says nothing is
  refused too: its epsilon could not be checked."""
  accounted = plan.sampling.noise
  says = getattr(factory, 'noise_strategies', None)
  applied = says(plan.rounds) if says is not None else None
  groups = plan.assignment.groups
  if applied is None:
    raise ValueError(
        f'algorithm {name!r}: its factory ({type(factory).__name__}) does not '
        'say which correlated noise each group\'s stream applies '
        f'(noise_strategies), so its plan\'s {type(accounted).__name__} '
        'cannot be checked; build its streams with correlated_noise.'
        'correlated_stream or give the stream a noise_strategy(rounds).')
  if len(applied) != len(groups):
    raise ValueError(
        f'algorithm {name!r}: its factory says the noise of '
        f'{len(applied)} groups for {len(groups)} privacy groups.')
  for group, strategy in zip(groups, applied):
    if group.is_private and strategy != accounted:
      raise ValueError(
          f'algorithm {name!r}: its factory applies '
          f'{_described(strategy, accounted)} to privacy group '
          f'{group.name!r}, but its plan accounts '
          f'{_described(accounted, strategy)}: the printed epsilon would not '
          'bound the release.')
