"""Noise-aware FedAvg for an untrusted server: DP-SGD clients, chosen rule.

SPEC.md §3. Every client privatizes its own update with DP-SGD at its own
(epsilon, delta) and batch size, so the server may be curious. The aggregation
rules differ only in what weight a client attaches to its update and in the
factory that combines them:

| name        | client's weight          | factory                       |
|-------------|--------------------------|-------------------------------|
| robust_hdp  | none (ignored)           | `RobustHDPFactory` (RPCA)     |
| oracle      | 1 / sigma_i^2 (true)     | weighted mean                 |
| weiavg      | epsilon_i                | weighted mean                 |
| dpfedavg    | N_i                      | weighted mean                 |
| pfa         | none (ignored)           | `PFAFactory` (norm GMM)       |
| min_epsilon | N_i, all at min epsilon  | weighted mean                 |
| median      | none (ignored)           | `CoordinateMedianFactory`     |

Each rule is a record of `tff_hdp.learning.algorithms`. The weight travels
as client data (see `dp_sgd.make_client_data`); for Robust-HDP, PFA and the
median it is a constant the unweighted factory never receives:
PFA infers who is public from the norms of the updates (PDP-FL).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.privacy import plans
from tff_hdp.learning import algorithms
from tff_hdp.learning import canaries as canaries_lib
from tff_hdp.learning import dp_sgd
from tff_hdp.learning import learning_process


def _record(name: str) -> algorithms.Algorithm:
  return algorithms.record(name, algorithms.UNTRUSTED)


def client_epsilons(name: str, epsilons: Sequence[float]) -> list[float]:
  """The epsilon each client runs at under algorithm `name` (min_epsilon:
  every client at the smallest)."""
  if _record(name).min_epsilon:
    return [min(epsilons)] * len(epsilons)
  return list(epsilons)


def client_weight(name: str, privacy: plans.ClientPrivacy,
                  learning_rate: float, clip_norm: float,
                  num_params: int) -> float:
  """The weight a client attaches to its update under algorithm `name`."""
  kind = _record(name).client_weight
  if kind == 'none':
    return 1.0
  if kind == 'epsilon':
    return privacy.epsilon
  if kind == 'num_examples':
    return float(privacy.num_examples)
  return 1.0 / privacy.update_noise_variance(learning_rate, clip_norm,
                                             num_params)


def build_aggregator(name: str,
                     **options) -> tff.aggregators.WeightedAggregationFactory:
  """The factory of algorithm `name` (its registry record's); `options` go to its
  constructor.

  An unweighted factory (Robust-HDP, PFA, the median) is wrapped so the
  learning process can pass the (ignored) client weight; its own process
  still sees only the updates.

  Args:
    name: an untrusted-setting algorithm of `tff_hdp.learning.algorithms`.
    **options: keyword arguments of the factory's constructor (its
      record's options, `algorithms.factory_options`).

  Returns:
    The weighted aggregation factory.

  Raises:
    ValueError: an unknown algorithm.
    TypeError: an option the factory's constructor does not take (option
      values it refuses raise its own ValueError).
  """
  factory = _record(name).build_factory(**options)
  if isinstance(factory, tff.aggregators.UnweightedAggregationFactory):
    return tff.aggregators.as_weighted_aggregator(factory)
  return factory


def build_noise_aware_fedavg(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    per_example_loss: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
    aggregator: tff.aggregators.WeightedAggregationFactory,
    learning_rate: float,
    clip_norm: float,
    server_optimizer: tff.learning.optimizers.Optimizer | None = None,
    canaries: canaries_lib.ExampleCanaries | None = None
) -> tff.learning.templates.LearningProcess:
  """FedAvg whose clients run one epoch of DP-SGD, combined by `aggregator`.

  The server applies the aggregate with `server_optimizer` (SGD with learning
  rate 1, i.e. theta <- theta - aggregate pseudo-gradient, by default).

  Args:
    model_fn: builds the TFF model.
    per_example_loss: `(y, predictions)` to the `[b]` losses DP-SGD clips.
    aggregator: the server rule, weighted by each client's float32 scalar
      weight (`build_aggregator`).
    learning_rate: the clients' DP-SGD step size.
    clip_norm: c, the per-example clip norm.
    server_optimizer: applies the aggregate (None: the default above).
    canaries: the clients' canary examples in an audit run
      (`dp_sgd.build_dp_sgd_client_work`).

  Returns:
    The `tff.learning.templates.LearningProcess`.

  Raises:
    ValueError: if `learning_rate` or `clip_norm` is not > 0.
  """
  return learning_process.compose(
      model_fn,
      dp_sgd.build_dp_sgd_client_work(model_fn, per_example_loss,
                                      learning_rate, clip_norm, canaries),
      aggregator, tff.TensorType(np.float32), server_optimizer)
