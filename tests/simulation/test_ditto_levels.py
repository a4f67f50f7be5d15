"""Each privacy level's Ditto lambda reaches its clients' training step."""

import numpy as np
import pytest

from tests.learning.test_ditto import two_clients_step_inputs
from tff_hdp.learning import ditto
from tff_hdp.privacy.privacy_groups import PrivacyGroup
from tff_hdp.privacy.privacy_groups import everyone_at_strictest
from tff_hdp.privacy.privacy_groups import GroupAssignment
from tff_hdp.simulation.trusted_setting import DittoSettings

pytestmark = pytest.mark.tf

LEVELS = (PrivacyGroup('private_eps1', 1.0, 1e-4),
          PrivacyGroup('private_eps10', 10.0, 1e-4), PrivacyGroup('opt_out'))
SETTINGS = DittoSettings(None, 0.3, 0.05,
                         {'private_eps1': 4.0, 'private_eps10': 0.5})


def test_each_group_gets_its_level_lambda():
  assert SETTINGS.group_lambdas(LEVELS, LEVELS) == [4.0, 0.5, 0.3]
  merged = everyone_at_strictest(GroupAssignment(LEVELS, {'a': 0, 'b': 1}))
  # DP-FedAvg trains everyone at eps 1's noise: eps 1's lambda.
  assert SETTINGS.group_lambdas(merged.groups, LEVELS) == [4.0]
  shared = DittoSettings(0.2, 0.3, 0.05)
  assert shared.group_lambdas(LEVELS, LEVELS) == [0.2, 0.2, 0.3]
  assert 'level_lambdas' not in shared.record()  # old run keys still match
  assert SETTINGS.record()['level_lambdas'] == SETTINGS.level_lambdas


@pytest.mark.tf
def test_clients_at_eps1_and_eps10_get_different_pulls_in_one_round():
  """One call of the step for a client at eps 1 and one at eps 10: each
  lands where a step with its own level's lambda for everyone lands, and
  the stricter level's larger lambda pulls its client closer to theta^t."""
  model_fn, data, global_weights, start = two_clients_step_inputs(3)

  def personal(lambdas):
    step = ditto.build_personalization(model_fn, lambdas, 0.05, epochs=3)
    return [np.asarray(o[0]) for o in step(global_weights, start, data)]

  both = personal(SETTINGS.group_lambdas(LEVELS, LEVELS))
  np.testing.assert_allclose(both[0], personal([4.0] * 3)[0], rtol=1e-6)
  np.testing.assert_allclose(both[1], personal([0.5] * 3)[1], rtol=1e-6)
  distance = [np.linalg.norm(p - global_weights.trainable[0]) for p in both]
  alone = [np.linalg.norm(p - global_weights.trainable[0])
           for p in personal([0.0] * 3)]
  assert distance[0] / alone[0] < 0.8 * distance[1] / alone[1]
