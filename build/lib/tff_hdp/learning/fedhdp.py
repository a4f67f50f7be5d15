"""FedHDP / FeO2 learning processes.

`tff_hdp.privacy.plans.plan_privacy` calibrates each private group's noise
multiplier from its (epsilon, delta) target; `build_fedhdp` composes the
learning process (broadcast, local SGD, group-wise DP aggregation, server
optimizer) with `tff.learning.templates.compose_learning_process`. DP-FedAvg and non-private
FedAvg are the same process with one private or one non-private group
(their registry records' `groups`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow_federated as tff

from tff_hdp.learning import canaries as canaries_lib
from tff_hdp.learning import client_work as client_work_lib
from tff_hdp.learning import learning_process


def build_fedhdp(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    aggregator: tff.aggregators.WeightedAggregationFactory,
    num_groups: int,
    client_optimizer: tff.learning.optimizers.Optimizer,
    server_optimizer: tff.learning.optimizers.Optimizer | None = None,
    local_epochs: int = 1,
    directions: canaries_lib.CanaryDirections | None = None
) -> tff.learning.templates.LearningProcess:
  """FedHDP as a TFF `LearningProcess`.

  `aggregator` receives each client's model delta weighted by its one-hot
  privacy-group vector; any `WeightedAggregationFactory` accepting that weight
  can be plugged in. The server applies the aggregate with `server_optimizer`
  (SGD with learning rate 1, i.e. theta <- theta + Delta, by default).

  Args:
    model_fn: builds the TFF model.
    aggregator: the server rule, weighted by float32[num_groups] one-hots.
    num_groups: l, the number of privacy groups.
    client_optimizer: the clients' local optimizer.
    server_optimizer: applies the aggregate (None: the default above).
    local_epochs: E, local epochs per round.
    directions: canaries' directions: clients' data carry canary rows, and
      the process keeps the canaries' scores (`canaries.track_scores`).

  Returns:
    The `tff.learning.templates.LearningProcess`.

  Raises:
    ValueError: if `local_epochs` is less than 1.
    TypeError: if `aggregator` refuses float32[num_groups] weights (e.g. a
      factory of another number of groups).
  """
  process = learning_process.compose(
      model_fn,
      client_work_lib.build_group_client_work(model_fn, client_optimizer,
                                              num_groups, local_epochs,
                                              directions),
      aggregator, tff.TensorType(np.float32, [num_groups]), server_optimizer)
  if directions is None:
    return process
  return canaries_lib.track_scores(process, directions)
