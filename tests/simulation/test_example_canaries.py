"""Canary examples estimate each DP-SGD client's (untrusted server) or
silo's (cross-silo) epsilon from the updates it sends, checked against the
closed-form Gaussian mechanism.

Clients of 10 examples with batches of 10 (cross-silo) or of at least 16
(untrusted, capped at the client's size) take one DP-SGD step a round at
q = 1, so every canary example is in every step: over T rounds the updates
a client sends hold T c v / n against noise N(0, T (z c / n)^2) on its direction, which is
mu-GDP with mu = sqrt(T) / z (z the client's own noise multiplier). Each
client's estimate must land near that closed form (within 20% of its
epsilon where mu >= 0.3), its lower bound below the printed epsilon, no alarm, and its estimate
above the printed epsilon with the alarm firing when the noise is secretly
halved.
"""


import numpy as np
import pytest
from scipy import optimize

from tff_hdp.tasks import digits
from tff_hdp.tasks import models
from tff_hdp.federated_task import FederatedTask
from tff_hdp.learning import dp_sgd
from tff_hdp.privacy import empirical_epsilon
from tff_hdp.privacy import plans
from tff_hdp.simulation import cross_silo_setting
from tff_hdp.simulation import untrusted_setting

pytestmark = pytest.mark.tf

DELTA = 1e-5
ROUNDS = 2
CANARIES = 2000  # per client: 8 clients x 2 x 2000 directions <= 65536


@pytest.fixture(scope='module')
def task():
  """8 digits clients of 10 training examples and a model of 38,410
  parameters: room for 32,000 canary directions."""
  base = digits.load(clients_per_digit=4, seed=0)
  ids = base.client_ids[::5][:8]
  return FederatedTask(
      'digits_wide_small',
      {c: tuple(a[:10] for a in base.train_arrays(c)) for c in ids},
      {c: base.test_arrays(c) for c in ids}, base.server_test,
      lambda: models.one_layer_nn(64, 10, hidden_units=512), base.loss_fn,
      base.batch_size)


# Each client's target epsilon in the cross-silo runs (the untrusted ones
# draw theirs from Uniform(1, 10)).
SILO_EPSILONS = (1.0, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0, 9.0)


def _run(task, setting, monkeypatch=None, noise_scale=1.0):
  """An audit run's summary and every client's noise multiplier."""
  if noise_scale != 1.0:
    original = dp_sgd.own_parameters

    def scaled(privacy, *args, **kwargs):
      own = original(privacy, *args, **kwargs)
      own['noise_multiplier'] = np.float32(noise_scale *
                                           own['noise_multiplier'])
      return own

    monkeypatch.setattr(dp_sgd, 'own_parameters', scaled)
  sizes = [task.num_train_examples(c) for c in task.client_ids]
  assert set(sizes) == {10}
  if setting == 'untrusted':
    settings = untrusted_setting.UntrustedSettings(
        rounds=ROUNDS, epsilon_distribution='uniform', delta=DELTA,
        learning_rate=0.05, clip_norm=1.0, eval_every=ROUNDS,
        checkpoint_every=0, canaries=CANARIES,
        unsafe_seeded_dp_randomness=True)
    summary = untrusted_setting.run_algorithm(task, 'dpfedavg', settings,
                                              None, progress=False)
    assert min(summary['batch_sizes']) == 10  # capped at the client's size
    return summary, [p.noise_multiplier for p in plans.plan_clients(
        summary['target_epsilons'], DELTA, sizes, summary['batch_sizes'],
        ROUNDS)]
  settings = cross_silo_setting.CrossSiloSettings(
      rounds=ROUNDS, epsilons=SILO_EPSILONS, delta=DELTA, learning_rate=0.05,
      clip_norm=1.0, eval_every=ROUNDS, checkpoint_every=0,
      canaries=CANARIES, unsafe_seeded_dp_randomness=True)
  summary = cross_silo_setting.run_algorithm(task, 'fedavg', settings, None,
                                             progress=False)
  assert {s['sampling_rate'] for s in summary['silos']} == {1.0}
  return summary, [s['noise_multiplier'] for s in summary['silos']]


SETTINGS = ('untrusted', 'cross_silo')


def gdp(mu):
  return empirical_epsilon.gaussian_epsilon(mu, 1.0, 0.0, 1.0, DELTA)


def mu_of(epsilon):
  """The mu whose GDP epsilon at DELTA is `epsilon`."""
  return optimize.brentq(lambda mu: gdp(mu) - epsilon, 1e-9, 50, xtol=1e-12)


# The tests of one setting read its one run (`audited`): one xdist worker
# runs them.
@pytest.fixture(scope='module', params=[
    pytest.param(s, marks=pytest.mark.xdist_group(f'test_example_canaries_{s}'))
    for s in SETTINGS])
def audited(request, task):
  return request.param, *_run(task, request.param)


def test_each_client_is_estimated_near_its_gaussian_mechanism(audited):
  """Also in mu, where the sampling error does not depend on mu: the
  difference of two means of K unit-variance scores has sd sqrt(2 / K) =
  0.032."""
  _, summary, noise_multipliers = audited
  audit = summary['empirical_epsilon']
  assert audit['threat_model'] == 'every update a client sends'
  assert summary['canaries'] == {'per_client': CANARIES,
                                 'unseen_per_client': CANARIES,
                                 'confidence': 0.95}
  exact = [np.sqrt(ROUNDS) / z for z in noise_multipliers]
  for client, mu in zip(audit['clients'], exact):
    # The accountant's RDP bound sits 7-10% above the exact epsilon here, so
    # an estimate may land on either side of the printed value; a lower
    # bound may not.
    assert gdp(mu) < client['epsilon_spent']
    assert client['expected_estimate'] == pytest.approx(gdp(mu), rel=1e-6)
    assert mu_of(client['estimate']) == pytest.approx(mu, abs=0.15)
    if mu >= 0.3:  # 20% of epsilon is then >= 2 sd of the estimate
      assert client['estimate'] == pytest.approx(gdp(mu), rel=0.2)
    assert 0 < client['lower_bound'] < client['epsilon_spent']
    assert (client['inserted'], client['unseen']) == (CANARIES, CANARIES)
    assert not client['alarm']
  assert audit['alarms'] == 0
  # Heterogeneity is visible: the targets spread over [1, 10].
  assert audit['rank_correlation'] > 0.9


def test_half_the_accounted_noise_is_caught(task, audited, monkeypatch):
  """Every client's alarm fires (its estimate's lower limit, at 95% split
  over the 8 clients, lies above its printed epsilon)."""
  setting, right_run, _ = audited
  broken, _ = _run(task, setting, monkeypatch, noise_scale=0.5)
  for client, right in zip(broken['empirical_epsilon']['clients'],
                           right_run['empirical_epsilon']['clients']):
    assert client['epsilon_spent'] == right['epsilon_spent']  # the ledger
    assert client['estimate'] > client['epsilon_spent']
    assert client['lower_bound'] > right['lower_bound']
    assert client['alarm'], setting
  assert broken['empirical_epsilon']['alarms'] == 8
