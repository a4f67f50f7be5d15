"""Cohort simulation computes the per-client FedHDP round, client by client."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.tasks import digits
from tff_hdp.privacy import plans
from tff_hdp.privacy import accounting
from tff_hdp.learning import client_work
from tff_hdp.learning import cohort
from tff_hdp.learning import execution
from tff_hdp.simulation import trusted_setting
from tff_hdp.learning import fedhdp
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.aggregators import CohortHeterogeneousDPFactory
from tff_hdp.aggregators import HeterogeneousDPFactory

pytestmark = pytest.mark.tf

EYE = np.eye(2, dtype=np.float32)
# The tests that read the module's `processes`: one xdist worker builds them.
_PROCESSES = pytest.mark.xdist_group('test_cohort_processes')


@pytest.fixture(scope='module')
def task():
  return digits.load(clients_per_digit=2, seed=0)


@pytest.fixture(scope='module')
def processes(task):
  """Per-client and cohort FedHDP with the same settings: 2 local epochs,
  momentum (its state must restart for every client), adaptive clipping."""
  args = dict(noise_multipliers=[0.0, 0.0], ratios=[0.3, 1.0],
              expected_group_sizes=[None, None], initial_clip_norm=3.2,
              target_unclipped_quantile=0.5, clip_learning_rate=0.3)
  opt = tff.learning.optimizers.build_sgdm(0.05, momentum=0.9)
  per_client = fedhdp.build_fedhdp(task.tff_model_fn(),
                                   HeterogeneousDPFactory(**args), 2, opt,
                                   local_epochs=2)
  cohorts = cohort.build_cohort_fedhdp(
      task.tff_model_fn(), CohortHeterogeneousDPFactory(**args), 2, opt,
      batch_size=task.batch_size, local_epochs=2)
  return per_client, cohorts


def _clients(task, count, poison=None):
  """Shuffled (x, y) of `count` clients with unequal sizes (some not a
  multiple of the batch size) and alternating groups."""
  arrays, groups = [], []
  for i, c in enumerate(task.client_ids[:count]):
    x, y = task.shuffled_train(c, seed=i)
    keep = len(x) - 3 * i
    x, y = x[:keep], y[:keep]
    if i == poison:
      x = np.full_like(x, np.nan)
    arrays.append((x, y))
    groups.append(EYE[int(i % 3 == 0)])
  return arrays, groups


def _per_client_data(task, arrays, groups):
  return [client_work.make_client_data(
      tf.data.Dataset.from_tensor_slices(a).batch(task.batch_size), g)
          for a, g in zip(arrays, groups)]


def _with_padding(arrays, groups, sizes, pad):
  """Cohorts of the given sizes, each with `pad` empty slots."""
  out, start = [], 0
  for k in sizes:
    out.append(cohort.pack_cohort(arrays[start:start + k],
                                  groups[start:start + k], 2, k + pad))
    start += k
  return out


def _assert_same_round(o1, o2, w1, w2):
  for a, b in zip(w1.trainable, w2.trainable):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  a1, a2 = o1.metrics['aggregator'], o2.metrics['aggregator']
  np.testing.assert_array_equal(a1['group_client_counts'],
                                a2['group_client_counts'])
  assert float(a1['fraction_clipped_estimate']) == pytest.approx(
      float(a2['fraction_clipped_estimate']))
  assert float(a1['clip_norm']) == pytest.approx(float(a2['clip_norm']),
                                                 rel=1e-6)
  c1, c2 = o1.metrics['client_work'], o2.metrics['client_work']
  assert c1['num_examples'] == c2['num_examples']
  assert c1['num_non_finite_updates'] == c2['num_non_finite_updates']
  for key in c1['train']:
    assert c1['train'][key] == pytest.approx(c2['train'][key], rel=1e-5)


@_PROCESSES
def test_cohort_rounds_equal_per_client_rounds(task, processes):
  per_client, cohorts = processes
  s1, s2 = per_client.initialize(), cohorts.initialize()
  for round_num in range(2):
    arrays, groups = _clients(task, 7)
    if round_num:
      arrays = arrays[::-1]  # other sizes in other slots
    o1 = per_client.next(s1, _per_client_data(task, arrays, groups))
    o2 = cohorts.next(s2, _with_padding(arrays, groups, [4, 3], pad=2))
    s1, s2 = o1.state, o2.state
    _assert_same_round(o1, o2, per_client.get_model_weights(s1),
                       cohorts.get_model_weights(s2))
    # The clip bits were informative: some clients clipped, some not.
    clipped = float(o1.metrics['aggregator']['fraction_clipped_estimate'])
    assert 0.0 < clipped < 1.0
  np.testing.assert_array_equal(
      o2.metrics['aggregator']['group_client_counts'], [4.0, 3.0])


@_PROCESSES
def test_non_finite_client_is_zeroed_and_counted(task, processes):
  per_client, cohorts = processes
  arrays, groups = _clients(task, 5, poison=3)
  o1 = per_client.next(per_client.initialize(),
                       _per_client_data(task, arrays, groups))
  o2 = cohorts.next(cohorts.initialize(), cohort.pack_round(arrays, groups,
                                                            2, 5))
  assert o2.metrics['client_work']['num_non_finite_updates'] == 1
  # Client 3 (group 1) is dropped: group 1 keeps client 0 only.
  np.testing.assert_array_equal(
      o2.metrics['aggregator']['group_client_counts'], [3.0, 1.0])
  assert np.isfinite(o2.metrics['client_work']['train']['loss'])
  w2 = cohorts.get_model_weights(o2.state)
  assert all(np.all(np.isfinite(w)) for w in w2.trainable)
  _assert_same_round(o1, o2, per_client.get_model_weights(o1.state), w2)


def test_rows_are_clipped_one_by_one_and_padding_ignored():
  rng = np.random.default_rng(3)
  values = [(rng.normal(size=(2, 3)) * rng.uniform(0.1, 3)).astype(np.float32)
            for _ in range(9)]
  groups = [EYE[g] for g in (0, 1, 1, 0, 0, 1, 0, 0, 1)]
  args = dict(noise_multipliers=[0.0, 0.0], ratios=[0.5, 1.0],
              expected_group_sizes=[4.0, None], initial_clip_norm=1.5,
              target_unclipped_quantile=0.3, clip_learning_rate=0.5,
              expected_clients_per_round=9.0)
  shape = tff.TensorType(np.float32, [2, 3])
  ours = CohortHeterogeneousDPFactory(**args).create(
      tff.TensorType(np.float32, [None, 2, 3]),
      tff.TensorType(np.float32, [None, 2]))
  theirs = HeterogeneousDPFactory(**args).create(
      shape, tff.TensorType(np.float32, [2]))
  # Two cohorts; the second has a padding row with a large value.
  stacked = [np.stack(values[:5]),
             np.concatenate([np.stack(values[5:]), np.full((1, 2, 3), 9.0,
                                                           np.float32)])]
  weights = [np.stack(groups[:5]),
             np.concatenate([np.stack(groups[5:]), np.zeros((1, 2),
                                                             np.float32)])]
  o = ours.next(ours.initialize(), stacked, weights)
  t = theirs.next(theirs.initialize(), values, groups)
  np.testing.assert_allclose(o.result, t.result, rtol=1e-5, atol=1e-7)
  assert float(o.state['clip_norm']) == pytest.approx(
      float(t.state['clip_norm']), rel=1e-6)
  for key in ('group_client_counts', 'group_weights',
              'unclipped_fraction_estimate'):
    np.testing.assert_allclose(o.measurements[key], t.measurements[key],
                               rtol=1e-6)


@pytest.mark.parametrize('isolate', [0, 1])
def test_group_noise_std_matches_the_per_client_aggregator(isolate):
  p = 40000
  z, d, s = [1.3, 0.4], [7.0, 25.0], 0.8
  args = dict(noise_multipliers=z,
              ratios=[1.0 if j == isolate else 0.0 for j in range(2)],
              expected_group_sizes=d, initial_clip_norm=s,
              clip_learning_rate=0.0, seed=11)
  groups = [EYE[g] for g in (0, 1, 0, 1, 1)]
  ours = CohortHeterogeneousDPFactory(**args).create(
      tff.TensorType(np.float32, [None, p]),
      tff.TensorType(np.float32, [None, 2]))
  theirs = HeterogeneousDPFactory(**args).create(
      tff.TensorType(np.float32, [p]), tff.TensorType(np.float32, [2]))
  o = ours.next(ours.initialize(), [np.zeros((3, p), np.float32),
                                    np.zeros((2, p), np.float32)],
                [np.stack(groups[:3]), np.stack(groups[3:])])
  t = theirs.next(theirs.initialize(), [np.zeros(p, np.float32)] * 5, groups)
  expected = z[isolate] * s / d[isolate]
  assert np.std(o.result) == pytest.approx(expected, rel=0.02)
  np.testing.assert_allclose(o.result, t.result, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(o.measurements['group_noise_stddev'],
                             t.measurements['group_noise_stddev'])


def test_split_and_pack():
  assert cohort.split_sizes(100, 64) == [50, 50]
  assert cohort.split_sizes(10, 64) == [10]
  assert cohort.split_sizes(201, 100) == [67, 67, 67]
  assert not cohort.split_sizes(0, 8)
  with pytest.raises(ValueError, match='cohort size'):
    cohort.split_sizes(5, 0)
  arrays = [(np.ones((n, 3), np.float32), np.arange(n, dtype=np.int32))
            for n in (2, 5)]
  element = cohort.pack_cohort(arrays, [EYE[1], EYE[0]], 2,
                               slots=3).get_single_element()
  x, y = element[cohort.DATA_KEY]
  assert x.shape == (3, 5, 3) and y.shape == (3, 5)
  np.testing.assert_array_equal(element[cohort.COUNT_KEY], [2, 5, 0])
  np.testing.assert_array_equal(element[cohort.GROUP_KEY],
                                [[0, 1], [1, 0], [0, 0]])
  np.testing.assert_array_equal(x[0, 2:], 0)
  with pytest.raises(ValueError, match='do not fit'):
    cohort.pack_cohort(arrays, [EYE[1], EYE[0]], 2, slots=1)


def test_experiment_with_cohorts_matches_per_client_run(task):
  # Private group with noise on: the noise is seeded (explicitly, for the
  # comparison), so the runs agree too.
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', 8.0, 1e-4)], 0.3, seed=0)
  weights, rows = [], []
  for cohort_size in (0, 3):
    settings = trusted_setting.Settings(
        rounds=2, sampling=accounting.PoissonSampling(0.5),
        clip=plans.ClipSettings(initial_norm=0.5, count_stddev=2.0),
        eval_every=2, checkpoint_every=0, cohort_size=cohort_size,
        unsafe_seeded_dp_randomness=True)
    summary, w = trusted_setting.run_configuration(
        task, trusted_setting.Configuration('fedhdp', 0.5), choices, settings,
        None, progress=False)
    weights.append(w)
    rows.append(summary)
  for a, b in zip(weights[0].trainable, weights[1].trainable):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
  assert rows[0]['metrics']['acc_g'] == pytest.approx(
      rows[1]['metrics']['acc_g'], abs=1.0)
  assert [g['epsilon_spent'] for g in rows[0]['groups']] == [
      g['epsilon_spent'] for g in rows[1]['groups']]


def test_cohort_size_is_lowered_until_its_stacked_models_fit():
  small, large = 159_010, 3_300_000  # the 784-200-10 network; a CNN
  assert execution.fit_cohort_size(64, small) == 64
  fitted = execution.fit_cohort_size(64, large)
  per_client = 10 * 4 * large  # ten float32 copies of the model per client
  assert fitted * per_client <= execution.COHORT_BYTES
  assert (fitted + 1) * per_client > execution.COHORT_BYTES
  assert execution.fit_cohort_size(64, 10**9) == 1  # one TFF client each
  assert execution.fit_cohort_size(0, large) == 0  # asked for none


def test_building_the_client_work_transpiles_only_the_loops(task,
                                                            monkeypatch):
  """Autograph converts the cohort's own loop functions, not the helpers
  without tensor control flow (`client_work`'s module docstring) nor the
  TFF optimizer step they call: converting those cost a third of the
  build, for the same graph."""
  from tensorflow.python.autograph.impl import api  # pylint: disable=g-import-not-at-top
  converted, convert = [], api._convert_actual  # pylint: disable=protected-access

  def recording(entity, program_ctx):
    converted.append(f'{entity.__module__}.{entity.__qualname__}')
    return convert(entity, program_ctx)

  monkeypatch.setattr(api, '_convert_actual', recording)
  cohort.build_cohort_client_work(
      task.tff_model_fn(), tff.learning.optimizers.build_sgdm(0.1), 2,
      task.batch_size)
  assert 'tff_hdp.learning.cohort.train_slot' in converted  # it does record
  skipped = [f'tff_hdp.learning.client_work.{name}' for name in
             ('local_step', 'drop_if_non_finite', 'train_output')]
  assert not set(skipped) & set(converted)
  assert not [c for c in converted if c.endswith('_SGD.next')]
