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

from tests.aggregators import signatures
from tests.aggregators.signatures import VALUE
from tff_hdp.aggregators.robust_hdp import RobustHDPFactory

pytestmark = pytest.mark.tf

@pytest.mark.parametrize('freeze_after_round', [None, 1])
def test_type_signatures_show_the_server_sees_only_updates(freeze_after_round):
  per_client = tff.TensorType(np.float32, [None])  # clients in the round
  signatures.assert_signatures(
      RobustHDPFactory(freeze_after_round=freeze_after_round).create(VALUE),
      state=collections.OrderedDict(round_num=np.int64,
                                    frozen_weights=per_client),
      client_inputs={'value': VALUE}, result=VALUE,
      measurements=collections.OrderedDict(
          weights=per_client,
          noise_variance_estimates=per_client,
          weights_frozen=np.bool_,
          rpca_converged=np.bool_,
          rpca_iterations=np.int32))
