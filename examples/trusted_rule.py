"""A new trusted-server rule from user code, trained from the command line.

Per privacy group, TFF's own `DifferentiallyPrivateFactory.gaussian_fixed`
(a fixed clip norm, the group's own noise multiplier, its expected size as
the denominator); the group means combined with fixed weights r_j D_j /
sum_k r_k D_k. Registered as `groupwise_fixed`, it is one more value of
--algorithms beside fedhdp, with its own rounds.csv columns and the epsilon
of the noise it applies:

  .venv/bin/python examples/trusted_rule.py --algorithms=groupwise_fixed,fedhdp \
      --epsilons=1,4 --rounds=20 --clients_per_round=20 --output_dir=/tmp/rule

Everything a run needs is in the record: how to build the factory from the
privacy plan (`build_factory`), that its clip norm is fixed (so the plan
calibrates each group's noise without a clip-count query), and the
measurements it reports with the printed epsilon covering each. TFF draws
this factory's noise from the operating system (unseeded), so a resumed run
draws new noise for the rounds it repeats, which the ledger does not count
twice only because checkpoints are taken every round here (--checkpoint_every
defaults to 10: pass 1 for this rule).
"""

import collections

import tff_hdp  # noqa: F401  (first: it quiets TensorFlow's start-up log)

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.learning import algorithms
from tff_hdp.privacy.release_policy import Measurement


class GroupwiseFixedFactory(tff.aggregators.WeightedAggregationFactory):
  """Per group j, TFF's DP mean with fixed clip S, noise multiplier z_j and
  denominator D_j; combined with weights r_j D_j / sum_k r_k D_k. The client
  weight is its one-hot group vector (float32[l])."""

  def __init__(self, noise_multipliers, expected_group_sizes, ratios, clip):
    self._z = [float(z) for z in noise_multipliers]
    self._sizes = [float(d) for d in expected_group_sizes]
    weights = np.array([r * d for r, d in zip(ratios, self._sizes)])
    self._weights = (weights / weights.sum()).astype(np.float32)
    self._clip = float(clip)

  def create(self, value_type, weight_type):
    l = len(self._z)
    if not weight_type.is_equivalent_to(tff.TensorType(np.float32, [l])):
      raise TypeError(f'the weight must be float32[{l}], got {weight_type}.')
    groups = [tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        z, d, self._clip).create(value_type)
              for z, d in zip(self._z, self._sizes)]
    def mask(j):
      @tff.tensorflow.computation(value_type, weight_type)
      def own(value, weight):  # the update in its group's slot, else zeros
        return tf.nest.map_structure(lambda x: x * weight[j], value)
      return own

    masks = [mask(j) for j in range(l)]
    weights = self._weights

    @tff.tensorflow.computation([value_type] * l)
    def combine(means):
      return tf.nest.map_structure(
          lambda *m: tf.add_n([w * x for w, x in zip(weights, m)]), *means)

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip(tuple(g.initialize() for g in groups))

    noise_std = [z * self._clip / d for z, d in zip(self._z, self._sizes)]

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS),
                               tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      outputs = [g.next(state[j], tff.federated_map(masks[j], (value, weight)))
                 for j, g in enumerate(groups)]
      result = tff.federated_map(
          combine, tff.federated_zip(tuple(o.result for o in outputs)))
      measurements = tff.federated_value(collections.OrderedDict(
          clip_norm=np.float32(self._clip),
          group_weights=weights,
          group_noise_stddev=np.array(noise_std, np.float32)), tff.SERVER)
      return tff.templates.MeasuredProcessOutput(
          tff.federated_zip(tuple(o.state for o in outputs)), result,
          measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)


def build(context: algorithms.TrustedContext) -> algorithms.GroupFactory:
  """The factory for the run's plan, and the noise it applies: the plan's
  noise multipliers, no clip-count query (the norm is fixed)."""
  plan = context.plan
  if not plan.accounted:
    raise ValueError('groupwise_fixed divides by expected group sizes: run '
                     'it with --denominator=expected.')
  sizes = plan.sampling.rate * plan.assignment.group_sizes()  # q N_j
  factory = GroupwiseFixedFactory(
      plan.noise_multipliers, sizes,
      [g.ratio for g in plan.assignment.groups], context.clip.initial_norm)
  return algorithms.GroupFactory(
      factory, algorithms.GroupNoise(plan.noise_multipliers, None))


RECORD = algorithms.Algorithm(
    'groupwise_fixed', algorithms.TRUSTED,
    'per-group TFF DP-FedAvg with a fixed clip', build,
    measurements=(
        Measurement('clip_norm', 'clip_norm'),
        Measurement('group_weights', 'weight_{group}', per_group=True),
        Measurement('group_noise_stddev', 'noise_std_{group}',
                    per_group=True)),
    fixed_clip=True)


if __name__ == '__main__':
  algorithms.register(RECORD)
  from tff_hdp.cli import run_experiment  # pylint: disable=g-import-not-at-top
  run_experiment.run()
