"""Per-client or cohort execution: the one place that chooses.

TFF pays ~20 ms of orchestration per client per round. With `cohort_size` > 1,
up to that many sampled clients share one TFF client (`tff_hdp.learning.cohort`):
each is still trained, clipped and counted on its own, with the same server
noise and accounting, so the choice changes speed, not the mechanism. Every
piece that differs between the two (aggregator, process, Ditto step, a round's
data, the Ditto update) is built here, so they cannot disagree. The same
holds for the cross-silo silos (`cross_silo_process`, `packed`): each runs its
own DP-SGD round with its own seed, personal model and cluster choice.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable, Hashable, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.federated_task import FederatedTask
from tff_hdp.learning import canaries as canaries_lib
from tff_hdp.learning import client_work
from tff_hdp.learning import cohort
from tff_hdp.learning import cross_silo_process
from tff_hdp.learning import ditto
from tff_hdp.learning import dp_sgd
from tff_hdp.learning import fedhdp
from tff_hdp.privacy.privacy_groups import GroupAssignment
from tff_hdp.privacy.plans import ClientPrivacy


# Bytes a cohort may hold in model-sized tensors stacked over its clients
# (updates, their clipped copies, per-client state: about
# `_MODEL_COPIES_PER_CLIENT` per simulated client, 4 bytes a parameter).
# TFF may run two cohorts at once, one per core.
COHORT_BYTES = 2 * 2**30
_MODEL_COPIES_PER_CLIENT = 10


def fit_cohort_size(requested: int, num_parameters: int) -> int:
  """The largest cohort size <= `requested` whose cohorts hold at most
  `COHORT_BYTES` of a `num_parameters` model's stacked tensors (1: one TFF
  client per client). `requested` <= 1 stays as it is."""
  if requested <= 1:
    return requested
  per_client = _MODEL_COPIES_PER_CLIENT * 4 * num_parameters
  return max(1, min(requested, COHORT_BYTES // per_client))


@dataclasses.dataclass(frozen=True)
class Execution:
  """How a round's clients reach TFF: one TFF client each (`cohort_size`
  <= 1) or packed `cohort_size` to a TFF client. With `canaries`, FedHDP's
  process and its round data carry canary rows (`tff_hdp.learning.canaries`).
  """

  cohort_size: int = 0
  canaries: canaries_lib.CanaryDirections | None = None

  @property
  def cohorts(self) -> bool:
    return self.cohort_size > 1

  def build_fedhdp(self, model_fn: Callable[[], tff.learning.models.VariableModel],
                   aggregator: tff.aggregators.WeightedAggregationFactory,
                   num_groups: int, batch_size: int, **training
                   ) -> tff.learning.templates.LearningProcess:
    """FedHDP's process around `aggregator` (weighted by the one-hot group
    vector; in cohorts by the [K, l] matrix of their rows).

    Args:
      model_fn: builds the TFF model.
      aggregator: the server rule (a trusted algorithm's `GroupFactory`).
      num_groups: l, the number of privacy groups.
      batch_size: the clients' batch size (cohorts batch inside TFF).
      **training: `client_optimizer`, `server_optimizer`, `local_epochs`.

    Returns:
      The learning process.
    """
    if self.cohorts:
      return cohort.build_cohort_fedhdp(model_fn, aggregator, num_groups,
                                        batch_size=batch_size,
                                        directions=self.canaries, **training)
    return fedhdp.build_fedhdp(model_fn, aggregator, num_groups,
                               directions=self.canaries, **training)

  def build_personalization(
      self, model_fn: Callable[[], tff.learning.models.VariableModel],
      lambdas: Sequence[float], learning_rate: float, batch_size: int,
      epochs: int) -> tff.Computation | ditto.CohortPersonalization:
    """Ditto's step with per-group `lambdas` (`ditto.build_personalization`
    or its cohort twin).

    Args:
      model_fn: builds the TFF model.
      lambdas: lambda per privacy group, each >= 0.
      learning_rate: eta_p, the personal step size.
      batch_size: examples per personal step of a cohort (per-client data
        comes batched).
      epochs: personal epochs per call.

    Returns:
      The step that `personalize` takes: the federated computation of
      `ditto.build_personalization`, or a `ditto.CohortPersonalization`.

    Raises:
      ValueError: if a lambda is negative, `learning_rate` is not > 0 or
        (cohorts) `batch_size` is less than 1.
    """
    if self.cohorts:
      return ditto.build_cohort_personalization(model_fn, lambdas,
                                                learning_rate, batch_size,
                                                epochs)
    return ditto.build_personalization(model_fn, lambdas, learning_rate,
                                       epochs)

  def round_data(self, task: FederatedTask, sampled: Sequence[Hashable],
                 seeds: Sequence[int], assignment: GroupAssignment,
                 canaries: Sequence[tuple[int, np.ndarray]] = ()) -> list:
    """The sampled clients' data, each read in its seed's order, as the
    process built by `build_fedhdp` takes it (`empty_round_data` when
    nobody was sampled). `canaries` are the sampled canaries' (row, group
    vector): clients without examples whose update is their direction, sent
    after the real clients (in cohorts of their own)."""
    if not sampled and not canaries:
      return self.empty_round_data(task, assignment)
    real_rows = ([canaries_lib.NOT_A_CANARY] * len(sampled)
                 if self.canaries else None)
    if self.cohorts:
      data = cohort.pack_round(
          [task.shuffled_examples(c, s) for c, s in zip(sampled, seeds)],
          [assignment.one_hot(c) for c in sampled], assignment.num_groups,
          self.cohort_size, real_rows) if sampled else []
      if canaries:
        data += cohort.pack_round(
            [self._no_examples(task)] * len(canaries),  # one, shared
            [group for _, group in canaries], assignment.num_groups,
            self.cohort_size, [row for row, _ in canaries])
      return data
    data = [client_work.make_client_data(task.train_dataset(c, s),
                                         assignment.one_hot(c),
                                         None if real_rows is None else
                                         canaries_lib.NOT_A_CANARY)
            for c, s in zip(sampled, seeds)]
    if canaries:
      empty = self._no_dataset(task)  # one for the round's canaries
      data += [client_work.make_client_data(empty, group, row)
               for row, group in canaries]
    return data

  @staticmethod
  def _no_examples(task: FederatedTask) -> tuple:
    """A client's example structure with no examples (cohorts)."""
    return tuple(x[:0] for x in task.shuffled_train(task.client_ids[0], 0))

  @staticmethod
  def _no_dataset(task: FederatedTask) -> tf.data.Dataset:
    """A client's batched dataset with no examples (per client)."""
    return task.train_dataset(task.client_ids[0], 0).take(0)

  def empty_round_data(self, task: FederatedTask,
                       assignment: GroupAssignment) -> list:
    """A round's data when Poisson sampling picked nobody: one client with no
    examples and a zero group vector, which adds nothing to any sum or count.

    The server still draws and releases the round's noise, the mechanism the
    ledger accounts; skipping the round would release an unchanged model and
    so tell everyone that it was empty, an event that depends on who took
    part.
    """
    nobody = np.zeros(assignment.num_groups, np.float32)
    row = canaries_lib.NOT_A_CANARY if self.canaries else None
    if self.cohorts:
      return cohort.pack_round([self._no_examples(task)], [nobody],
                               assignment.num_groups, self.cohort_size,
                               None if row is None else [row])
    return [client_work.make_client_data(self._no_dataset(task), nobody, row)]

  def personalize(self, step, models: ditto.PersonalModels, global_weights,
                  sampled: Sequence[Hashable], data: list) -> None:
    """The sampled clients' Ditto steps from `global_weights` on the round's
    `data` (from `round_data`; canaries, which come last, take none);
    updates `models` in place."""
    personal = [models.get(c, global_weights.trainable) for c in sampled]
    if self.cohorts:
      sizes = cohort.split_sizes(len(sampled), self.cohort_size)
      personal = ditto.unstack_personal(step(
          global_weights, ditto.stack_personal(personal, sizes),
          data[:len(sizes)]))
    else:
      personal = step(global_weights, personal, [
          collections.OrderedDict((k, v) for k, v in d.items()
                                  if k != canaries_lib.CANARY_KEY)
          for d in data[:len(sampled)]])
    models.update(sampled, personal)

  def build_cross_silo(self, *args, **kwargs) -> tff.templates.IterativeProcess:
    """`cross_silo_process.build_cross_silo_process(*args, **kwargs)`, packed
    `cohort_size` silos to a TFF client with cohorts."""
    return cross_silo_process.build_cross_silo_process(
        *args, packed=self.cohorts, **kwargs)

  def silo_round(self, process: tff.templates.IterativeProcess, state,
                 personal: Sequence, task: FederatedTask, order: int,
                 silo_plans: Sequence[ClientPrivacy], weights: Sequence[float],
                 seeds: Sequence[int], roles: Sequence,
                 indexed: bool = False) -> tuple:
    """One round of `process` (from `build_cross_silo`) for every silo of
    `task`, each reading its data in `order`'s order, from its `personal`
    model, with its plan, update weight, seed and role
    (`cross_silo_process.make_role`); `indexed`: each silo is also told its
    index, which names its canaries (a process built with canaries).

    Returns:
      The new state, each silo's new personal model and chosen cluster (in
      `task.client_ids` order) and the round's measurements.
    """
    silos = task.client_ids
    if not self.cohorts:
      data = [cross_silo_process.make_client_data(
          task.train_dataset(c, order), p, w, s, r,
          index=i if indexed else None)
              for i, (c, p, w, s, r) in enumerate(zip(
                  silos, silo_plans, weights, seeds, roles))]
      state, outputs, measurements = process.next(state, list(personal), data)
      return (state, [o['personal'] for o in outputs],
              [int(o['cluster']) for o in outputs], measurements)
    own = [dp_sgd.own_parameters(p, w, s, steps=p.steps_per_epoch,
                                 index=i if indexed else None)
           for i, (p, w, s) in enumerate(zip(silo_plans, weights, seeds))]
    data = cross_silo_process.pack_silos(
        [task.shuffled_train(c, order) for c in silos], own, roles,
        self.cohort_size)
    sizes = [len(d[cohort.COUNT_KEY]) for d in data]
    state, outputs, measurements = process.next(
        state, ditto.stack_personal(personal, sizes), data)
    return (state, ditto.unstack_personal([o['personal'] for o in outputs]),
            [int(g) for o in outputs for g in o['cluster']], measurements)
