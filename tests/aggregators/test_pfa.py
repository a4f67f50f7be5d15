"""PFA's factory in TFF's type-signature half: a stateless server that
receives nothing from the clients but their updates (no epsilon: it infers
who is public from the update norms) and returns one update in their
structure with its report on the partition and on the norm mixture. The
execution half (the projection, the partition, one-group rounds) is in
tests/learning/test_noise_aware.py."""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from tests.aggregators import signatures
from tests.aggregators.signatures import VALUE
from tff_hdp.aggregators.pfa import PFAFactory

pytestmark = pytest.mark.tf

def test_type_signatures_show_a_stateless_server_that_sees_only_updates():
  signatures.assert_signatures(
      PFAFactory().create(VALUE), state=(), client_inputs={'value': VALUE},
      result=VALUE,
      measurements=collections.OrderedDict(
          # One entry per client of the round.
          public=tff.TensorType(np.bool_, [None]),
          num_public=np.int32,
          num_private=np.int32,
          update_norms=tff.TensorType(np.float32, [None]),
          # The two mixture components, public first.
          mixture_means=tff.TensorType(np.float32, [2]),
          mixture_converged=np.bool_,
          mixture_iterations=np.int32))
