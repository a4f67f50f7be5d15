"""The one way this project assembles a TFF `LearningProcess`.

Every algorithm is broadcast -> its client work -> a `tff.aggregators` factory
-> a server optimizer, composed by `compose_learning_process`; algorithms
differ only in the client work and in the aggregation factory and the client
weight it takes.
"""

from __future__ import annotations

import random
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

INITIAL_WEIGHTS_SEED = 0


def seeded_initial_weights(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    seed: int = INITIAL_WEIGHTS_SEED) -> tff.learning.models.ModelWeights:
  """The model's weights as its initializers draw them from `seed`.

  Every configuration of a comparison, and every re-run, starts alike. Keras
  initializers without a seed draw theirs from Python's generator, so it is
  seeded (with NumPy's and TF's, by `set_random_seed`), then Python's and
  NumPy's global states are put back: building a process must not reset a
  caller's generators. Call it where the weights are built (inside the TF
  computation).
  """
  python_state, numpy_state = random.getstate(), np.random.get_state()
  try:
    tf.keras.utils.set_random_seed(seed)
    return tff.learning.models.ModelWeights.from_model(model_fn())
  finally:
    random.setstate(python_state)
    np.random.set_state(numpy_state)


def compose(model_fn: Callable[[], tff.learning.models.VariableModel],
            client_work: tff.learning.templates.ClientWorkProcess,
            aggregator: tff.aggregators.WeightedAggregationFactory,
            weight_type: tff.Type,
            server_optimizer: tff.learning.optimizers.Optimizer | None = None,
            value_type: tff.Type | None = None
            ) -> tff.learning.templates.LearningProcess:
  """Composes the process; the server applies the aggregate with
  `server_optimizer` (SGD with learning rate 1 by default: theta <- theta +
  Delta, the aggregate being a pseudo-gradient -Delta). `value_type` is what
  each TFF client sends the aggregator: the trainable weights' type by
  default, stacked updates for cohorts (`tff_hdp.learning.cohort`)."""
  if server_optimizer is None:
    server_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=1.0)

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return seeded_initial_weights(model_fn)

  weights_type = initial_model_weights_fn.type_signature.result
  distributor = tff.learning.templates.build_broadcast_process(weights_type)
  if value_type is None:
    value_type = weights_type.trainable
  aggregation = aggregator.create(value_type, weight_type)
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      server_optimizer, weights_type)
  return tff.learning.templates.compose_learning_process(
      initial_model_weights_fn, distributor, client_work, aggregation,
      finalizer)
