"""MR-MTL and its cross-silo baselines as one TFF iterative process (SPEC.md §2).

Every method of the MR-MTL paper is, per round and per silo, the same client
step with a different role:
  * start from the silo's personal model, or reset to its cluster's model;
  * optionally pick the cluster privately (IFCA's exponential mechanism over
    the clusters' error rates, report-noisy-min with Gumbel noise);
  * one epoch of DP-SGD at the silo's own noise multiplier and sampling rate,
    with the pull `lambda (w - anchor)` toward its cluster's model inside
    every example's gradient (clipped and noised with it, as the MR-MTL
    authors' code has it) or added after clipping and noising
    (`regularizer_placement`);
  * send the change `Delta_k` (as a pseudo-gradient) with weight
    `one_hot(cluster) * n_k` to a per-cluster mean (a `tff.aggregators`
    factory, `ClusterMeanFactory` by default).
MR-MTL keeps personal models (lambda = 0 is local training), FedAvg resets every
round, IFCA resets to the selected cluster; Ditto adds a second, personal epoch
per round that is not aggregated (and is charged to its privacy budget).

The process is a `tff.templates.IterativeProcess` rather than a
`LearningProcess` because it returns each silo's new personal model (and
cluster choice) at CLIENTS: `next(state, personal, client_data) -> (state,
client_outputs, measurements)`. The driver keeps them in a per-silo store,
like Ditto's, so they survive checkpoints.
"""

from __future__ import annotations

import collections
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import clipping
from tff_hdp.aggregators import stacking
from tff_hdp.aggregators.cluster_mean import ClusterMeanFactory
from tff_hdp.learning import canaries as canaries_lib
from tff_hdp.learning import cohort
from tff_hdp.learning import dp_sgd
from tff_hdp.learning import learning_process
from tff_hdp.privacy import plans

DATA_KEY = dp_sgd.DATA_KEY
PRIVACY_KEY = dp_sgd.PRIVACY_KEY
ROLE_KEY = 'role'
# The state's canary sums in an audit run (`dp_sgd.canary_scores`).
CANARIES_KEY = 'canaries'


def role_type(num_clusters: int) -> tff.Type:
  """What the driver tells a silo about this round.

  `learning_rate` is the DP-SGD step size and `regularization` lambda (inputs,
  not constants, so one process serves a whole sweep); `reset` starts the
  epoch from the cluster model instead of the personal one; `select_epsilon`
  > 0 makes the silo choose its cluster privately this round, else `cluster`
  (a one-hot) is used.
  """
  return tff.types.to_type(
      collections.OrderedDict(
          learning_rate=np.float32, regularization=np.float32,
          reset=np.bool_,
          select_epsilon=np.float32,
          cluster=tff.TensorType(np.float32, [num_clusters])))


def make_role(learning_rate: float, regularization: float, reset: bool,
              select_epsilon: float, cluster: int,
              num_clusters: int) -> collections.OrderedDict:
  return collections.OrderedDict(
      learning_rate=np.float32(learning_rate),
      regularization=np.float32(regularization), reset=np.bool_(reset),
      select_epsilon=np.float32(select_epsilon),
      cluster=np.eye(num_clusters, dtype=np.float32)[cluster])


def make_client_data(dataset: tf.data.Dataset, privacy: plans.ClientPrivacy,
                     weight: float, seed: int,
                     role: collections.OrderedDict,
                     index: int | None = None) -> collections.OrderedDict:
  """A silo's input: its batches, its DP-SGD parameters (one epoch of steps
  per training call; in an audit run, its index) and this round's role, each
  a sequence as TFF needs."""
  data = dp_sgd.make_client_data(dataset, privacy, weight, seed,
                                 steps=privacy.steps_per_epoch, index=index)
  data[ROLE_KEY] = tf.data.Dataset.from_tensors(role)
  return data


def packed_data_type(model_input_spec, num_clusters: int,
                     indexed: bool = False) -> tff.Type:
  """TFF type of a packed TFF client's data (`pack_silos`): its K silos'
  examples padded to `[K, n_max, ...]`, their counts, and their privacy
  parameters (with `indexed`, each silo's index) and roles stacked `[K]`."""
  privacy = dp_sgd.client_data_type(model_input_spec,
                                    indexed)[PRIVACY_KEY].element
  return tff.types.to_type(collections.OrderedDict([
      (DATA_KEY, stacking.stacked_type(model_input_spec)),
      (cohort.COUNT_KEY, tff.TensorType(np.int32, [None])),
      (PRIVACY_KEY, stacking.stacked_type(privacy)),
      (ROLE_KEY, stacking.stacked_type(role_type(num_clusters))),
  ]))


def pack_silos(examples, privacy, roles, cohort_size: int) -> list:
  """Silos' inputs for a `packed` process: `examples` (each an `(x, y)` in
  training order), `privacy` (each `dp_sgd.own_parameters` with one epoch of
  steps, as `make_client_data` sends it) and `roles` (`make_role`), cut into
  the fewest balanced packs of at most `cohort_size`."""
  packs = []
  for part_examples, part_privacy, part_roles in zip(
      cohort.split(examples, cohort_size), cohort.split(privacy, cohort_size),
      cohort.split(roles, cohort_size)):
    data, counts = cohort.pad_examples(part_examples)
    packs.append(collections.OrderedDict([
        (DATA_KEY, data), (cohort.COUNT_KEY, counts),
        (PRIVACY_KEY, tf.nest.map_structure(lambda *v: np.stack(v),
                                            *part_privacy)),
        (ROLE_KEY, tf.nest.map_structure(lambda *v: np.stack(v),
                                         *part_roles)),
    ]))
  return packs


def private_selection(scores: tf.Tensor, epsilon, sensitivity, seed):
  """Index of the lowest score by the exponential mechanism.

  Report-noisy-min with Gumbel noise of scale `2 * sensitivity / epsilon`
  samples index g with probability proportional to
  `exp(-epsilon * scores[g] / (2 * sensitivity))`: (epsilon, 0)-DP.
  """
  u = tf.random.stateless_uniform(tf.shape(scores), seed, minval=1e-12,
                                  maxval=1.0, dtype=scores.dtype)
  gumbel = -tf.math.log(-tf.math.log(u))
  return tf.argmin(scores - 2.0 * sensitivity / epsilon * gumbel,
                   output_type=tf.int32)


def _stack(models):
  """Trainable weights of several models, each leaf stacked on axis 0."""
  return tf.nest.map_structure(lambda *vs: tf.stack(vs), *models)


def _build_silo_round(model_fn, per_example_loss, per_example_error,
                      clip_norm, num_clusters, personal_epoch,
                      regularizer_placement, canaries):
  """The body of a silo's round, `(models, personal, (x, y), own, role) ->
  (update, weight, outputs, non_finite, audit)` on its examples, for a
  tf.function (whose automatic control dependencies keep its stateful
  steps, assigning the model's variables for selection and each training
  epoch, in program order). With `canaries` (`ExampleCanaries`), every
  epoch holds the silo's canary examples and `audit` is its slot of the
  sums `dp_sgd.canary_scores` reads (zero elsewhere), from the update it
  sends; else `audit` is ()."""
  local = model_fn()
  # The step size comes from the role at every call.
  train = dp_sgd.build_local_dp_sgd(
      local, per_example_loss, 1.0, clip_norm, regularizer_placement,
      canaries=canaries.directions if canaries else None)

  def silo_round(models, personal, examples, own, role):
    x, y = examples
    seed = tf.stack([own['seed'], models['round_num']])
    rows = canaries.rows(own[dp_sgd.INDEX_KEY]) if canaries else None
    clusters = models['clusters']

    def cluster_model(g):
      return tf.nest.map_structure(lambda c: c[g], clusters)

    def select():
      weights = tff.learning.models.ModelWeights.from_model(local)
      errors = []
      for g in range(num_clusters):
        tf.nest.map_structure(lambda v, t: v.assign(t), weights.trainable,
                              cluster_model(g))
        errors.append(tf.reduce_mean(tf.cast(
            per_example_error(y, local.predict_on_batch(x, training=False)),
            tf.float32)))
      n = tf.cast(tf.shape(x)[0], tf.float32)
      chosen = private_selection(
          tf.stack(errors), role['select_epsilon'],
          1.0 / tf.maximum(n - 1.0, 1.0),
          tf.random.experimental.stateless_fold_in(seed, 2))
      return tf.one_hot(chosen, num_clusters, dtype=tf.float32)

    if per_example_error is not None:
      one_hot = tf.cond(role['select_epsilon'] > 0, select,
                        lambda: role['cluster'])
    else:
      one_hot = role['cluster']
    anchor = tf.nest.map_structure(
        lambda c: tf.tensordot(one_hot, c, axes=1), clusters)

    def epoch(start, regularization, call):
      update, _ = train(
          tff.learning.models.ModelWeights(start, models['non_trainable']),
          (x, y), own['noise_multiplier'],
          own['sampling_rate'], own['steps'],
          tf.random.experimental.stateless_fold_in(seed, call),
          regularization, anchor, role['learning_rate'],
          canary_rows=None if rows is None else rows[0])
      return update

    if personal_epoch:
      update = epoch(anchor, 0.0, 0)
      new_personal = tf.nest.map_structure(
          tf.subtract, personal, epoch(personal, role['regularization'], 1))
    else:
      start = tf.nest.map_structure(
          lambda a, p: tf.where(role['reset'], a, p), anchor, personal)
      update = epoch(start, role['regularization'], 0)
      new_personal = tf.nest.map_structure(tf.subtract, start, update)
    finite = tf.logical_and(clipping.all_finite(update),
                            clipping.all_finite(new_personal))
    update = clipping.zero_unless(finite, update)
    new_personal = tf.nest.map_structure(lambda u, p: tf.where(finite, u, p),
                                         new_personal, personal)
    weight = clipping.zero_unless(finite, one_hot * own['weight'])
    audit = () if rows is None else dp_sgd.canary_slots(
        canaries, own[dp_sgd.INDEX_KEY], rows, update)
    return (update, weight,
            collections.OrderedDict(
                personal=new_personal,
                cluster=tf.argmax(one_hot, output_type=tf.int32)),
            tf.cast(tf.logical_not(finite), tf.int32), audit)

  return silo_round


def _build_client_step(silo_round):
  """One silo's round (`_build_silo_round`'s body) as one tf.function."""

  @tf.function
  def step(models, personal, client_data):
    examples = dp_sgd.split_batch(dp_sgd.whole_dataset(client_data[DATA_KEY]))
    return silo_round(models, personal, examples,
                      client_data[PRIVACY_KEY].get_single_element(),
                      client_data[ROLE_KEY].get_single_element())

  return step


def _build_packed_step(silo_round, num_clusters, canaries):
  """The round of a TFF client holding K silos (`pack_silos`): each silo's
  round (`_build_silo_round`'s body) in turn, on its own examples only, in
  one in-graph loop; the results stacked along a leading axis (non-finite
  counts and canary slots summed)."""

  @tf.function
  def step(models, personal, packed):
    data, counts = packed[DATA_KEY], packed[cohort.COUNT_KEY]
    num_silos = tf.shape(counts)[0]

    def row(structure, k):
      return tf.nest.map_structure(lambda t: t[k], structure)

    def run(k):
      examples = dp_sgd.split_batch(tf.nest.map_structure(
          lambda t: t[k, :counts[k]], data))
      return silo_round(models, row(personal, k), examples,
                        row(packed[PRIVACY_KEY], k), row(packed[ROLE_KEY], k))

    def array(dtype, shape):
      return tf.TensorArray(dtype, size=num_silos, element_shape=shape)

    def model_arrays():
      return [array(v.dtype, v.shape[1:]) for v in tf.nest.flatten(personal)]

    arrays = (model_arrays(), array(tf.float32, [num_clusters]),
              collections.OrderedDict(personal=model_arrays(),
                                      cluster=array(tf.int32, [])))
    non_finite = tf.constant(0, tf.int32)
    audit = () if canaries is None else dp_sgd.no_canary_slots(canaries)
    for k in tf.range(num_silos):
      update, weight, outputs, silo_non_finite, silo_audit = run(k)
      arrays = tf.nest.map_structure(
          lambda a, t: a.write(k, t), arrays,  # pylint: disable=cell-var-from-loop
          (tf.nest.flatten(update), weight,
           collections.OrderedDict(
               personal=tf.nest.flatten(outputs['personal']),
               cluster=outputs['cluster'])))
      non_finite += silo_non_finite
      audit = tf.nest.map_structure(tf.add, audit, silo_audit)
    stacked = tf.nest.map_structure(lambda a: a.stack(), arrays)
    update = tf.nest.pack_sequence_as(personal, stacked[0])
    outputs = collections.OrderedDict(
        personal=tf.nest.pack_sequence_as(personal, stacked[2]['personal']),
        cluster=stacked[2]['cluster'])
    return update, stacked[1], outputs, non_finite, audit

  return step


def build_cross_silo_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    per_example_loss: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
    per_example_error: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None,
    clip_norm: float,
    num_clusters: int = 1,
    personal_epoch: bool = False,
    aggregator: tff.aggregators.WeightedAggregationFactory | None = None,
    cluster_init_stddev: float = 0.1,
    seed: int = 0,
    packed: bool = False,
    regularizer_placement: str = dp_sgd.REGULARIZER_PER_EXAMPLE,
    canaries: canaries_lib.ExampleCanaries | None = None
) -> tff.templates.IterativeProcess:
  """The round of every cross-silo method; see the module docstring.

  `per_example_error(y, predictions)` is the 0/1 error IFCA's selection
  scores with (its error rate has sensitivity 1/(n-1)); None disables
  selection. `personal_epoch` is Ditto: the aggregated epoch starts from the
  cluster model without regularization and a second epoch trains the
  personal model toward it. With several clusters, each cluster model starts
  at the model's initial weights plus its own seeded `N(0,
  cluster_init_stddev^2)` perturbation, so that IFCA's clusters differ from
  the start even for a deterministic initializer (e.g. zeros).

  Args:
    model_fn: builds the TFF model.
    per_example_loss: `(y, predictions)` to the `[b]` losses DP-SGD clips.
    per_example_error: IFCA's selection error, or None (see above).
    clip_norm: c, DP-SGD's per-example clip norm.
    num_clusters: G, the number of cluster models (1: one global model).
    personal_epoch: Ditto's second, personal epoch per round.
    aggregator: the server rule, weighted by float32[G] (a silo's cluster
      one-hot times its weight); None is `ClusterMeanFactory(num_clusters)`.
    cluster_init_stddev: std of the clusters' initial perturbation.
    seed: seeds the initial weights and the clusters' perturbations.
    packed: each TFF client holds several silos (`pack_silos`): their
      personal models stacked `[K, ...]`, their data padded, their outputs
      stacked. Each silo still runs its own round on its own examples with
      its own seed, so only TFF's per-client cost changes.
    regularizer_placement: where MR-MTL's (and Ditto's) pull
      `lambda (w - anchor)` joins DP-SGD's gradient (one of
      `dp_sgd.REGULARIZER_PLACEMENTS`): inside every example's gradient,
      clipped and noised with it (the MR-MTL authors' code), or added to
      the noisy gradient (data-independent; SPEC.md §2).
    canaries: the silos' canary examples in an audit run: each silo's data
      then holds its index, and the state its running sums of `<u_t, v>`
      and `||u_t||^2` over the updates it sent (`dp_sgd.canary_scores`).

  Returns:
    A `tff.templates.IterativeProcess` with `next(state, personal,
    client_data) -> (state, client_outputs, measurements)`: the server state
    holds the stacked cluster models, the non-trainable weights, the round
    number and the aggregator's state; `client_outputs` at CLIENTS are each
    silo's new `personal` model and chosen `cluster`.

  Raises:
    ValueError: if `clip_norm` is not > 0, or (default aggregator)
      `num_clusters` is less than 1.
  """
  if not clip_norm > 0:
    raise ValueError(f'clip norm must be > 0, got {clip_norm}.')
  if aggregator is None:
    aggregator = ClusterMeanFactory(num_clusters)
  with tf.Graph().as_default():
    model = model_fn()
  weights_type = tff.learning.models.weights_type_from_model(model)
  personal_type = weights_type.trainable
  weight_type = tff.TensorType(np.float32, [num_clusters])
  if packed:
    personal_type = stacking.stacked_type(personal_type)
    weight_type = stacking.stacked_type(weight_type)
    data_type = packed_data_type(model.input_spec, num_clusters,
                                 indexed=bool(canaries))
  else:
    data_type = tff.types.to_type(
        collections.OrderedDict([
            (DATA_KEY, tff.SequenceType(
                tff.types.tensorflow_to_type(model.input_spec))),
            (PRIVACY_KEY, dp_sgd.client_data_type(
                model.input_spec, indexed=bool(canaries))[PRIVACY_KEY]),
            (ROLE_KEY, tff.SequenceType(role_type(num_clusters))),
        ]))
  aggregation = aggregator.create(personal_type, weight_type)

  @tff.tensorflow.computation
  def initial_models():
    weights = learning_process.seeded_initial_weights(model_fn, seed)
    clusters = [weights.trainable]
    if num_clusters > 1:
      clusters = [
          [v + cluster_init_stddev * tf.random.stateless_normal(
              tf.shape(v), [seed, g * 1000 + i], dtype=v.dtype)
           for i, v in enumerate(weights.trainable)]
          for g in range(num_clusters)
      ]
    return collections.OrderedDict(
        clusters=_stack(clusters),
        non_trainable=weights.non_trainable,
        round_num=tf.constant(0, tf.int64))

  @tff.tensorflow.computation
  def no_scores():
    return dp_sgd.no_canary_slots(canaries) if canaries else ()

  @tff.federated_computation
  def init_fn():
    return tff.federated_zip(
        collections.OrderedDict(
            models=tff.federated_eval(initial_models, tff.SERVER),
            aggregator=aggregation.initialize(),
            **({CANARIES_KEY: tff.federated_eval(no_scores, tff.SERVER)}
               if canaries else {})))

  state_type = init_fn.type_signature.result.member
  models_type = state_type.models

  @tff.tensorflow.computation(models_type, personal_type, data_type)
  def client_step(models, personal, client_data):
    silo_round = _build_silo_round(model_fn, per_example_loss,
                                   per_example_error, clip_norm, num_clusters,
                                   personal_epoch, regularizer_placement,
                                   canaries)
    step = (_build_packed_step(silo_round, num_clusters, canaries) if packed
            else _build_client_step(silo_round))
    return step(models, personal, client_data)

  @tff.tensorflow.computation(models_type, models_type.clusters)
  def apply(models, means):
    out = collections.OrderedDict(models)
    out['clusters'] = tf.nest.map_structure(tf.subtract, models['clusters'],
                                            means)
    out['round_num'] = models['round_num'] + 1
    return out

  if canaries:
    scores_type = state_type[CANARIES_KEY]

    @tff.tensorflow.computation(scores_type, scores_type)
    def add_scores(total, added):
      return tf.nest.map_structure(tf.add, total, added)

  @tff.federated_computation(
      init_fn.type_signature.result,
      tff.FederatedType(personal_type, tff.CLIENTS),
      tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, personal, client_data):
    update, weight, outputs, non_finite, audit = tff.federated_map(
        client_step,
        (tff.federated_broadcast(state.models), personal, client_data))
    aggregated = aggregation.next(state.aggregator, update, weight)
    new_state = tff.federated_zip(
        collections.OrderedDict(
            models=tff.federated_map(apply,
                                     (state.models, aggregated.result)),
            aggregator=aggregated.state,
            **({CANARIES_KEY: tff.federated_map(
                add_scores, (state[CANARIES_KEY], tff.federated_sum(audit)))}
               if canaries else {})))
    measurements = tff.federated_zip(
        collections.OrderedDict(
            aggregator=aggregated.measurements,
            num_non_finite_updates=tff.federated_sum(non_finite)))
    return new_state, outputs, measurements

  return tff.templates.IterativeProcess(init_fn, next_fn)


def cluster_weights(state, cluster: int) -> tff.learning.models.ModelWeights:
  """Cluster `cluster`'s model (the global model when there is one)."""
  models = state['models']
  return tff.learning.models.ModelWeights(
      [np.asarray(c[cluster]) for c in models['clusters']],
      [np.asarray(v) for v in models['non_trainable']])
