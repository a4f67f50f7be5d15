"""An aggregation process's type signatures, written out by hand.

Every `tff.aggregators` factory's process has the same frame: `initialize`
gives the server state, and `next` takes that state and the clients' inputs
and returns the state, one result and the measurements, all at the server.
Tests state what fills the frame (state, inputs, result, measurements) and
`assert_signatures` compares both signatures with it.
"""

import collections

import numpy as np
import tensorflow_federated as tff

# As a model update reaches an aggregator: a Python container of tensors.
VALUE = tff.types.to_type(collections.OrderedDict(
    w=tff.TensorType(np.float32, [2, 2]), b=tff.TensorType(np.float32, [3])))


def _assert_equivalent(actual, expected):
  assert actual.is_equivalent_to(expected), f'{actual}\n  is not\n{expected}'


def assert_signatures(process, state, client_inputs: dict, result,
                      measurements) -> None:
  """`initialize: ( -> state@SERVER)` and `next: (<state@SERVER,
  input@CLIENTS for each of client_inputs, in order> -> <state@SERVER,
  result@SERVER, measurements@SERVER>)`."""
  server_state = tff.FederatedType(state, tff.SERVER)
  _assert_equivalent(process.initialize.type_signature,
                     tff.FunctionType(None, server_state))
  _assert_equivalent(
      process.next.type_signature,
      tff.FunctionType(
          parameter=collections.OrderedDict(
              state=server_state,
              **{name: tff.FederatedType(t, tff.CLIENTS)
                 for name, t in client_inputs.items()}),
          result=tff.templates.MeasuredProcessOutput(
              state=server_state,
              result=tff.FederatedType(result, tff.SERVER),
              measurements=tff.FederatedType(measurements, tff.SERVER))))
