"""Robust-HDP's factory in TFF's type-signature half: the server keeps only a
round number and the weights it may freeze, whatever `freeze_after_round` is;
it receives nothing from the clients but their updates (no epsilon, batch size
or weight), and returns one update in their structure with its report on the
weights and on RPCA. The execution half (weights against the noise levels,
freezing, non-convergence) is in tests/learning/test_noise_aware.py."""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_hdp.aggregators.robust_hdp import RobustHDPFactory

# As a model update reaches an aggregator: a Python container of tensors.
VALUE = tff.types.to_type(collections.OrderedDict(
    w=tff.TensorType(np.float32, [2, 2]), b=tff.TensorType(np.float32, [3])))


def _assert_equivalent(actual, expected):
  assert actual.is_equivalent_to(expected), f'{actual}\n  is not\n{expected}'


@pytest.mark.parametrize('freeze_after_round', [None, 1])
def test_type_signatures_show_the_server_sees_only_updates(freeze_after_round):
  process = RobustHDPFactory(
      freeze_after_round=freeze_after_round).create(VALUE)
  per_client = tff.TensorType(np.float32, [None])  # clients in the round
  state = tff.FederatedType(
      collections.OrderedDict(round_num=np.int64, frozen_weights=per_client),
      tff.SERVER)
  _assert_equivalent(process.initialize.type_signature,
                     tff.FunctionType(None, state))
  _assert_equivalent(
      process.next.type_signature,
      tff.FunctionType(
          parameter=collections.OrderedDict(
              state=state, value=tff.FederatedType(VALUE, tff.CLIENTS)),
          result=tff.templates.MeasuredProcessOutput(
              state=state,
              result=tff.FederatedType(VALUE, tff.SERVER),
              measurements=tff.FederatedType(
                  collections.OrderedDict(
                      weights=per_client,
                      noise_variance_estimates=per_client,
                      weights_frozen=np.bool_,
                      rpca_converged=np.bool_,
                      rpca_iterations=np.int32),
                  tff.SERVER))))
