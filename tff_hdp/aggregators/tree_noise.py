"""A clipped sum with the online binary tree's noise: TFF's DP-FTRL
aggregator (`DifferentiallyPrivateFactory.tree_aggregation`, TF Privacy's
`TreeResidualSumQuery`), for one group.

TFF's factory needs the records' specs when it is built; this one reads
them from the value type in `create`, so it stands wherever an unweighted
sum factory does (`PerGroupStreamsFactory`'s streams). It returns the sum
(clients_per_round 1): the caller divides by its own public count. The
noise of Honaker's efficient estimator (`use_efficient=True`) is the
default, as in TFF; either way a device's release is accounted by the
tree's sensitivity (`min_separation.tree_sensitivity_squared`), as the
estimator is post-processing of the tree's nodes.

In cohorts (`clip_updates=False`) a TFF client's value is the sum of
device rows already clipped to `clip`: TF Privacy's query then sums the
values unclipped, with the same tree noise (std `noise_multiplier * clip`
per node), where TFF's factory would clip each cohort's sum as one record.
"""

from __future__ import annotations

import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_hdp.privacy import min_separation


def _unclipped(record, clip):
  """TF Privacy's clip function that keeps the record: its rows were
  clipped where the cohort was formed."""
  del clip
  return record


class TreeSumFactory(tff.aggregators.UnweightedAggregationFactory):
  """Updates clipped to `clip` and summed, with tree noise of std
  `noise_multiplier * clip` per node, from `seed`."""

  def __init__(self, noise_multiplier: float, clip: float, seed: int,
               use_efficient: bool = True,
               clip_updates: bool = True) -> None:
    if not noise_multiplier > 0:
      raise ValueError(f'noise_multiplier must be > 0, got {noise_multiplier}.')
    if not clip > 0:
      raise ValueError(f'clip must be > 0, got {clip}.')
    self._noise_multiplier = float(noise_multiplier)
    self._clip = float(clip)
    self._seed = int(seed)
    self._use_efficient = bool(use_efficient)
    self._clip_updates = bool(clip_updates)

  def noise_strategy(self, rounds: int) -> min_separation.TreeNoise:
    """The tree's strategy (for any `rounds`; either estimator is
    post-processing of its nodes): what a run's ledger must account for
    this stream (`tff_hdp.learning.correlated_noise.check_applied_noise`)."""
    del rounds
    return min_separation.TreeNoise()

  def create(self, value_type: tff.types.Type
             ) -> tff.templates.AggregationProcess:
    specs = tff.types.type_to_tf_tensor_specs(tff.types.to_type(value_type))
    if self._clip_updates:
      return tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation(
          self._noise_multiplier, 1.0, self._clip, specs,
          noise_seed=self._seed, use_efficient=self._use_efficient,
      ).create(value_type)
    noise = tfp.tree_aggregation.GaussianNoiseGenerator(
        noise_std=self._clip * self._noise_multiplier, specs=specs,
        seed=self._seed)
    query = tfp.TreeResidualSumQuery(
        clip_fn=_unclipped, clip_value=self._clip, record_specs=specs,
        noise_generator=noise, use_efficient=self._use_efficient)
    return tff.aggregators.DifferentiallyPrivateFactory(
        tfp.NormalizedQuery(query, denominator=1.0)).create(value_type)
