"""PFA's factory in TFF's type-signature half: a stateless server that
receives nothing from the clients but their updates (no epsilon: it infers
who is public from the update norms) and returns one update in their
structure with its report on the partition and on the norm mixture. The
execution half (the projection, the partition, one-group rounds) is in
tests/learning/test_noise_aware.py."""

import collections

import numpy as np
import tensorflow_federated as tff

from tff_hdp.aggregators.pfa import PFAFactory

# As a model update reaches an aggregator: a Python container of tensors.
VALUE = tff.types.to_type(collections.OrderedDict(
    w=tff.TensorType(np.float32, [2, 2]), b=tff.TensorType(np.float32, [3])))


def _assert_equivalent(actual, expected):
  assert actual.is_equivalent_to(expected), f'{actual}\n  is not\n{expected}'


def test_type_signatures_show_a_stateless_server_that_sees_only_updates():
  process = PFAFactory().create(VALUE)
  no_state = tff.FederatedType((), tff.SERVER)
  _assert_equivalent(process.initialize.type_signature,
                     tff.FunctionType(None, no_state))
  _assert_equivalent(
      process.next.type_signature,
      tff.FunctionType(
          parameter=collections.OrderedDict(
              state=no_state, value=tff.FederatedType(VALUE, tff.CLIENTS)),
          result=tff.templates.MeasuredProcessOutput(
              state=no_state,
              result=tff.FederatedType(VALUE, tff.SERVER),
              measurements=tff.FederatedType(
                  collections.OrderedDict(
                      # One entry per client of the round.
                      public=tff.TensorType(np.bool_, [None]),
                      num_public=np.int32,
                      num_private=np.int32,
                      update_norms=tff.TensorType(np.float32, [None]),
                      # The two mixture components, public first.
                      mixture_means=tff.TensorType(np.float32, [2]),
                      mixture_converged=np.bool_,
                      mixture_iterations=np.int32),
                  tff.SERVER))))
