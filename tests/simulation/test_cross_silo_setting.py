"""MR-MTL and the cross-silo baselines (SPEC.md §2): privacy, selection, state."""

import dataclasses
import json
import os
import signal

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
from dp_accounting import rdp

from tff_hdp.tasks import models
from tff_hdp.privacy import plans
from tff_hdp.privacy import accounting
from tff_hdp.privacy import silo_lambdas
from tff_hdp.simulation import cross_silo_setting as cse
from tff_hdp.learning import cross_silo_process
from tff_hdp.learning import ditto
from tff_hdp.federated_task import FederatedTask

pytestmark = pytest.mark.tf

FEATURES = 5


def _clustered_task(num_silos=6, examples=120, seed=0) -> FederatedTask:
  """Linearly separable silos in two clusters whose labels are mirrored:
  silo k is in cluster k % 2."""
  rng = np.random.default_rng(seed)
  direction = rng.normal(size=FEATURES)
  train, test = {}, {}
  for k in range(num_silos):
    sign = 1.0 if k % 2 == 0 else -1.0
    for out, n in ((train, examples), (test, 40)):
      x = rng.normal(size=(n, FEATURES)).astype(np.float32)
      y = np.where(x @ direction >= 0, sign, -sign).astype(np.float32)
      out[f'silo{k}'] = (x, y.reshape(-1, 1))
  return FederatedTask(
      name='clustered', client_train=train, client_test=test,
      server_test=test['silo0'],
      keras_model_fn=lambda: models.linear(FEATURES),
      loss_fn=tf.keras.losses.Hinge, batch_size=20, metric='sign_accuracy')


def _settings(**kw):
  # Seeded DP randomness, so that runs can be compared (the resume test
  # uses the secret seed).
  base = dict(rounds=4, epsilons=(4.0,), delta=1e-4, learning_rate=0.2,
              clip_norm=2.0, regularization=0.5, num_clusters=2,
              selection_fraction=0.5, selection_share=0.3, eval_every=2,
              checkpoint_every=2, unsafe_seeded_dp_randomness=True)
  base.update(kw)
  return cse.CrossSiloSettings(**base)


def test_silo_epsilon_equals_dp_accounting_for_its_q_z_and_steps():
  task = _clustered_task()
  plans = cse.plan_silos(task, cse.algorithm_record('mrmtl'), _settings(rounds=50))
  p = plans[0]
  accountant = rdp.RdpAccountant()
  accountant.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(
          p.sampling_rate, dp_accounting.GaussianDpEvent(p.noise_multiplier)),
      50 * (120 // 20)))  # floor(n / b) steps an epoch
  direct = accountant.get_epsilon(1e-4)
  assert p.epsilon_after(50) == pytest.approx(direct, rel=1e-9)
  # Calibrated to spend the budget, not less.
  assert 4.0 * 0.99 <= direct <= 4.0 * (1 + 1e-6)


def test_ditto_pays_for_its_second_epoch_with_more_noise():
  task = _clustered_task()
  s = _settings(rounds=50)
  mrmtl = cse.plan_silos(task, cse.algorithm_record('mrmtl'), s)[0]
  dit = cse.plan_silos(task, cse.algorithm_record('ditto'), s)[0]
  assert dit.steps_per_round == 2 * mrmtl.steps_per_round
  assert dit.noise_multiplier > mrmtl.noise_multiplier * 1.2
  assert dit.epsilon_after(50) == pytest.approx(4.0, rel=0.01)


def _zcdp_epsilon(rho: float, delta: float) -> float:
  """(eps, delta) of rho-zCDP by the conversion dp_accounting's RDP accountant
  uses (Canonne et al. 2020), minimized over a fine grid of orders."""
  alphas = np.linspace(1.01, 2000, 400000)
  eps = (alphas * rho + np.log((alphas - 1) / alphas) -
         (np.log(delta) + np.log(alphas)) / (alphas - 1))
  return float(eps.min())


def test_selection_cost_is_the_exponential_mechanisms_zcdp():
  # 20 selections at eps 0.3: rho = 20 * 0.3^2 / 8 (Rogers & Steinke).
  spent = accounting.epsilon_spent(
      1.0, None, accounting.PoissonSampling(0.1), 0, 1e-5,
      accounting.exponential_mechanism_event(0.3, 20))
  oracle = _zcdp_epsilon(20 * 0.3**2 / 8, 1e-5)
  # The accountant evaluates a finite list of orders: at or a little above.
  assert oracle <= spent <= oracle * 1.02


def test_ifca_selection_shares_the_budget_with_dp_sgd():
  task = _clustered_task()
  s = _settings(rounds=40, selection_fraction=0.1, selection_share=0.03)
  ifca = cse.plan_silos(task, cse.algorithm_record('ifca'), s)[0]
  fedavg = cse.plan_silos(task, cse.algorithm_record('fedavg'), s)[0]
  assert ifca.selection_rounds == 4
  assert ifca.selection_epsilon == pytest.approx(0.03 * 4.0)
  assert ifca.noise_multiplier > fedavg.noise_multiplier
  accountant = rdp.RdpAccountant()
  accountant.compose(dp_accounting.ComposedDpEvent([
      dp_accounting.SelfComposedDpEvent(
          dp_accounting.PoissonSampledDpEvent(
              ifca.sampling_rate,
              dp_accounting.GaussianDpEvent(ifca.noise_multiplier)),
          40 * ifca.steps_per_round),
      dp_accounting.SelfComposedDpEvent(
          dp_accounting.GaussianDpEvent(2 / (0.03 * 4.0)), 4)]))
  assert ifca.epsilon_after(40) == pytest.approx(accountant.get_epsilon(1e-4),
                                                 rel=1e-9)
  assert ifca.epsilon_after(40) <= 4.0 * (1 + 1e-6)


def test_a_selection_share_that_eats_the_budget_is_refused():
  with pytest.raises(accounting.InfeasiblePrivacyTargetError,
                     match='smaller share'):
    plans.plan_client_privacy(1.0, 1e-5, 100, 10, 100,
                               selection_epsilon=0.9, selection_rounds=100)


def test_exponential_mechanism_samples_softmax_of_scaled_scores():
  scores = tf.constant([0.10, 0.15, 0.30])
  eps, sensitivity = 0.5, 0.05

  @tf.function
  def draw(seeds):
    return tf.map_fn(
        lambda s: cross_silo_process.private_selection(scores, eps,
                                                       sensitivity, s),
        seeds, fn_output_signature=tf.int32)

  n = 20000
  seeds = tf.stack([tf.range(n, dtype=tf.int64),
                    tf.fill([n], tf.constant(7, tf.int64))], axis=1)
  counts = np.bincount(draw(seeds).numpy(), minlength=3) / n
  logits = -eps * scores.numpy() / (2 * sensitivity)
  expected = np.exp(logits) / np.exp(logits).sum()
  np.testing.assert_allclose(counts, expected, atol=4 * np.sqrt(0.25 / n))


def test_delta_must_be_below_n_to_the_minus_1_1():
  task = _clustered_task(examples=30)
  with pytest.raises(ValueError, match='--deltas'):
    cse.plan_silos(task, cse.algorithm_record('local'), _settings(delta=0.1))


def test_ifca_is_refused_on_a_regression_task():
  task = _clustered_task()
  task.metric = 'mse'
  with pytest.raises(ValueError, match='error rate'):
    cse.plan_silos(task, cse.algorithm_record('ifca'), _settings())


@pytest.fixture(scope='module')
def task():
  return _clustered_task()


def _personal(run_dir, task, algorithm, settings, round_num):
  """The saved personal models, as {silo: [arrays]} (every silo has one)."""
  name = cse.configuration_name(cse.algorithm_record(algorithm), settings)
  store = ditto.PersonalModels.load(
      str(run_dir / name / 'checkpoints' / f'personal_round_{round_num}.npz'),
      task.client_ids)
  assert len(store) == len(task.client_ids)
  return {c: store.get(c, []) for c in task.client_ids}


def test_local_training_ignores_the_other_silos(task, tmp_path):
  s = _settings(rounds=2, checkpoint_every=2)
  cse.run_algorithm(task, 'local', s, str(tmp_path / 'all'), progress=False)
  alone = FederatedTask(
      name='one', client_train={'silo0': task.client_train['silo0']},
      client_test={'silo0': task.client_test['silo0']},
      server_test=task.server_test, keras_model_fn=task.keras_model_fn,
      loss_fn=task.loss_fn, batch_size=task.batch_size,
      metric=task.metric)
  # Silo 0 draws the same batches and noise in both runs (it is first).
  cse.run_algorithm(alone, 'local', s, str(tmp_path / 'one'), progress=False)
  with_others = _personal(tmp_path / 'all', task, 'local', s, 2)['silo0']
  by_itself = _personal(tmp_path / 'one', alone, 'local', s, 2)['silo0']
  for x, y in zip(with_others, by_itself):
    np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
  # MR-MTL with lambda > 0 does feel the others.
  cse.run_algorithm(task, 'mrmtl', s, str(tmp_path / 'all'), progress=False)
  pulled = _personal(tmp_path / 'all', task, 'mrmtl', s, 2)['silo0']
  assert not np.allclose(pulled[0], with_others[0])


def test_each_silo_gets_the_lambda_of_its_epsilon(task, tmp_path):
  """Silos at eps 4 with lambda 0 train as local training does, in the same
  run as silos at eps 8 with lambda 0.5, which are pulled to the mean."""
  eps = (4.0, 8.0) * 3
  local = _settings(rounds=2, checkpoint_every=2, epsilons=eps)
  by_eps = _settings(rounds=2, checkpoint_every=2, epsilons=eps,
                     epsilon_lambdas=((4.0, 0.0), (8.0, 0.5)))
  assert cse.configuration_name(cse.algorithm_record('mrmtl'), by_eps) == (
      'mrmtl_lr0.2_lambdaeps4-0_eps8-0.5')
  first = cse.run_algorithm(task, 'local', local, str(tmp_path),
                            progress=False)
  out = cse.run_algorithm(task, 'mrmtl', by_eps, str(tmp_path),
                          progress=False)
  # Each epsilon's metric over its silos: with the test counts, they make
  # up the run's metric, and the worst is the worse of the two.
  levels = out['metric_by_epsilon']
  assert set(levels) == {'4', '8'} == set(first['metric_by_epsilon'])
  counts = {e: sum(len(task.test_arrays(c)[0])
                   for c in task.client_ids[k::2])
            for k, e in enumerate(('4', '8'))}
  assert out['metric'] == pytest.approx(
      sum(levels[e] * counts[e] for e in levels) / sum(counts.values()),
      rel=1e-6)
  better = task.metric_record.better
  assert out['metric_worst_epsilon'] == (
      levels['8'] if better(levels['4'], levels['8']) else levels['4'])
  assert levels['4'] != levels['8']
  alone = _personal(tmp_path, task, 'local', local, 2)
  pulled = _personal(tmp_path, task, 'mrmtl', by_eps, 2)
  for c in task.client_ids[0::2]:  # eps 4: lambda 0
    for x, y in zip(alone[c], pulled[c]):
      np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
  for c in task.client_ids[1::2]:  # eps 8: lambda 0.5
    assert not np.allclose(alone[c][0], pulled[c][0])
  with pytest.raises(ValueError, match='for every silo epsilon'):
    cse.plan_silos(task, cse.algorithm_record('mrmtl'), dataclasses.replace(
        by_eps, epsilon_lambdas=((4.0, 0.1),)))


def test_each_silo_trains_with_its_noise_aware_lambda(task, tmp_path):
  """Silos at eps 1 get a larger lambda from the closed form than silos at
  eps 8 (more noise, less trust in their own data), the summary records
  each silo's, and training uses exactly those: the same run with them
  given by epsilon ends in the same personal models."""
  eps = (1.0, 8.0) * 3
  aware = _settings(rounds=2, checkpoint_every=2, epsilons=eps,
                    noise_aware_lambdas=True, heterogeneity=0.5)
  assert cse.configuration_name(cse.algorithm_record('mrmtl'), aware) == (
      'mrmtl_lr0.2_lambda_noise_h0.5')
  out = cse.run_algorithm(task, 'mrmtl', aware, str(tmp_path), progress=False)
  lams = [s['lambda'] for s in out['silos']]
  plans = cse.plan_silos(task, cse.algorithm_record('mrmtl'), aware)
  assert lams == list(silo_lambdas.plan_lambdas(
      plans, task.num_trainable_parameters, 0.5))
  assert lams[0::2] == [lams[0]] * 3 and lams[1::2] == [lams[1]] * 3
  assert lams[0] > 2 * lams[1]
  assert out['settings']['noise_aware_lambdas'] is True
  given = _settings(rounds=2, checkpoint_every=2, epsilons=eps,
                    epsilon_lambdas=((1.0, lams[0]), (8.0, lams[1])))
  cse.run_algorithm(task, 'mrmtl', given, str(tmp_path), progress=False)
  pulled = _personal(tmp_path, task, 'mrmtl', aware, 2)
  by_eps = _personal(tmp_path, task, 'mrmtl', given, 2)
  for c in task.client_ids:
    for x, y in zip(pulled[c], by_eps[c]):
      np.testing.assert_array_equal(x, y)
  with pytest.raises(ValueError, match='no lambdas by epsilon'):
    cse.plan_silos(task, cse.algorithm_record('mrmtl'), dataclasses.replace(
        given, noise_aware_lambdas=True))


def test_ifca_recovers_the_two_clusters(task):
  s = _settings(rounds=6, epsilons=(50.0,), selection_fraction=0.5,
                selection_share=0.05, checkpoint_every=0)
  out = cse.run_algorithm(task, 'ifca', s, None, progress=False)
  clusters = np.array(out['final_clusters'])
  truth = np.arange(6) % 2
  assert (np.all(clusters == truth) or np.all(clusters == 1 - truth)), clusters
  fedavg = cse.run_algorithm(task, 'fedavg', s, None, progress=False)
  # One shared model cannot fit mirrored labels; the clusters can.
  assert out['metric'] > fedavg['metric'] + 20


def test_resume_restores_personal_models_and_clusters_bit_for_bit(
    task, tmp_path, monkeypatch):
  s = _settings(rounds=4, checkpoint_every=2,
                unsafe_seeded_dp_randomness=False)
  straight = cse.run_algorithm(task, 'ifca_mrmtl', s, str(tmp_path / 'a'),
                            progress=False)
  # The crashed run gets the straight run's secret seed (its checkpoint keeps
  # it), so that the two runs can be compared.
  name = cse.configuration_name(cse.algorithm_record('ifca_mrmtl'), s)
  (tmp_path / 'b' / name / 'checkpoints').mkdir(parents=True)
  (tmp_path / 'b' / name / 'checkpoints' / 'dp_secret_seed').write_text(
      (tmp_path / 'a' / name / 'checkpoints' / 'dp_secret_seed').read_text())
  build = cse.build_process

  class Crash(Exception):
    pass

  class CrashingProcess:
    """The real process, killed in its third round."""

    def __init__(self, process):
      self._process, self._calls = process, 0
      self.initialize = process.initialize

    def next(self, *args):
      self._calls += 1
      if self._calls == 3:
        raise Crash()
      return self._process.next(*args)

  def crashing(*args):
    return CrashingProcess(build(*args))

  monkeypatch.setattr(cse, 'build_process', crashing)
  with pytest.raises(Crash):
    cse.run_algorithm(task, 'ifca_mrmtl', s, str(tmp_path / 'b'), progress=False)
  monkeypatch.setattr(cse, 'build_process', build)
  resumed = cse.run_algorithm(task, 'ifca_mrmtl', s, str(tmp_path / 'b'),
                           progress=False)
  assert resumed['metric'] == straight['metric']
  assert resumed['final_clusters'] == straight['final_clusters']
  a = _personal(tmp_path / 'a', task, 'ifca_mrmtl', s, 4)
  b = _personal(tmp_path / 'b', task, 'ifca_mrmtl', s, 4)
  for c in task.client_ids:
    assert len(a[c]) == len(b[c]) == 2
    for x, y in zip(a[c], b[c]):
      np.testing.assert_array_equal(x, y)
  rows = (tmp_path / 'b' / name / 'rounds.csv').read_text().splitlines()
  assert [r.split(',')[0] for r in rows[1:]] == ['1', '2', '3', '4']


def test_sweep_reports_the_best_setting_and_the_curve(task, tmp_path):
  s = _settings(rounds=2, checkpoint_every=0)
  result = cse.sweep(task, 'mrmtl', s, [0.0, 1.0], [0.05, 0.2],
                     str(tmp_path), progress=False)
  assert len(result['runs']) == 4
  best = max(result['runs'], key=lambda r: r[2])
  assert (result['best_lambda'], result['best_learning_rate'],
          result['best_metric']) == best
  assert sorted(l for l, _, _ in result['curve']) == [0.0, 1.0]
  lines = (tmp_path / 'sweep_mrmtl.csv').read_text().splitlines()
  assert lines[0] == 'method,lambda,learning_rate,sign_accuracy'
  assert len(lines) == 5


def _dp_sgd_epsilon(plan) -> float:
  """A plan's epsilon from dp_accounting directly (no selections)."""
  accountant = rdp.RdpAccountant()
  accountant.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(
          plan.sampling_rate,
          dp_accounting.GaussianDpEvent(plan.noise_multiplier)),
      plan.rounds * plan.steps_per_round))
  return accountant.get_epsilon(plan.delta)


def test_a_stored_calibration_is_used_only_if_it_is_the_calibrated_one():
  fresh = plans.plan_client_privacy(2.0, 1e-4, 300, 30, 20)
  assert _dp_sgd_epsilon(fresh) <= 2.0
  z = fresh.noise_multiplier
  for stored in (z, z * 0.8, z * 1.3, -1.0):
    plans.plan_client_privacy.cache_clear()
    plan = plans.plan_client_privacy(2.0, 1e-4, 300, 30, 20,
                                     known_noise_multiplier=stored)
    # Too little noise (z * 0.8) would break the target and too much
    # (z * 1.3) would waste utility: both are calibrated again.
    assert plan.noise_multiplier == pytest.approx(z, abs=2e-6)
    assert _dp_sgd_epsilon(plan) <= 2.0


def test_silo_calibrations_are_kept_on_disk_for_the_next_process(
    tmp_path, monkeypatch):
  task = _clustered_task(num_silos=3)
  algorithm = cse.algorithm_record('mrmtl')
  settings = cse.CrossSiloSettings(rounds=5, epsilons=(1.0, 2.0, 4.0),
                                   delta=1e-4, learning_rate=0.1,
                                   clip_norm=1.0)
  path = str(tmp_path / cse.CALIBRATIONS_FILE)
  first = cse.plan_silos(task, algorithm, settings, calibrations=path)
  assert os.path.exists(path)
  # A new process: nothing cached in memory, and no calibration allowed.
  plans.plan_client_privacy.cache_clear()
  accounting.calibrate_noise_multiplier.cache_clear()

  def refuse(*args, **kwargs):
    raise AssertionError('calibrated again despite the stored values')

  monkeypatch.setattr(plans.accounting, 'calibrate_noise_multiplier', refuse)
  second = cse.plan_silos(task, algorithm, settings, calibrations=path)
  assert [p.noise_multiplier for p in second] == [
      p.noise_multiplier for p in first]
  for plan, eps in zip(second, (1.0, 2.0, 4.0)):
    assert _dp_sgd_epsilon(plan) <= eps


class _Deadline:
  """Fails the block if it runs past `seconds`: a guard against a hang, not
  a measure of speed (SIGALRM interrupts the accountant's Python loops)."""

  def __init__(self, seconds):
    self._seconds = seconds

  def _expired(self, signum, frame):
    raise TimeoutError(f'still running after {self._seconds} s')

  def __enter__(self):
    self._previous = signal.signal(signal.SIGALRM, self._expired)
    signal.alarm(self._seconds)

  def __exit__(self, *exc):
    signal.alarm(0)
    signal.signal(signal.SIGALRM, self._previous)


@pytest.mark.parametrize('stored', [
    'Infinity', '-Infinity', 'NaN', '-1', '0', '"4.1"', 'true', 'null',
    '1e300', '1e12', '[2.0]'])
def test_a_tampered_calibration_is_dropped_at_once(tmp_path, stored):
  """Each value once hung the planning (Infinity: the accountant never
  returns), raised (1e300: z^2 overflows) or was given to the accountant;
  now every silo is calibrated afresh, to the same z as without a file."""
  task = _clustered_task(num_silos=2)  # q = 20 / 120 < 1: inf would hang
  algorithm = cse.algorithm_record('mrmtl')
  settings = cse.CrossSiloSettings(rounds=3, epsilons=(2.0,), delta=1e-4,
                                   learning_rate=0.1, clip_norm=1.0)
  path = tmp_path / cse.CALIBRATIONS_FILE
  calibrated = cse.plan_silos(task, algorithm, settings,
                              calibrations=str(path))
  keys = list(json.loads(path.read_text()))
  path.write_text('{' + ', '.join(f'{json.dumps(k)}: {stored}'
                                  for k in keys) + '}')
  plans.plan_client_privacy.cache_clear()  # the calibration stays cached
  with _Deadline(60):
    again = cse.plan_silos(task, algorithm, settings, calibrations=str(path))
  assert [p.noise_multiplier for p in again] == [
      p.noise_multiplier for p in calibrated]
  # The file holds the calibrated values again.
  assert set(json.loads(path.read_text()).values()) == {
      p.noise_multiplier for p in calibrated}
