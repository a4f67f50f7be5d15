"""The cohort Ditto step takes every client's per-client Ditto steps."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.tasks import digits
from tff_hdp.privacy import plans
from tff_hdp.privacy import accounting
from tff_hdp.learning import client_work
from tff_hdp.learning import cohort
from tff_hdp.learning import ditto
from tff_hdp.simulation import trusted_setting
from tff_hdp.privacy import privacy_groups as pg

pytestmark = pytest.mark.tf

EYE = np.eye(2, dtype=np.float32)
LAMBDAS = [0.2, 3.0]
LR = 0.1
EPOCHS = 2


@pytest.fixture(scope='module')
def task():
  return digits.load(clients_per_digit=2, seed=0)


@pytest.fixture(scope='module')
def steps(task):
  per_client = ditto.build_personalization(task.tff_model_fn(), LAMBDAS, LR,
                                           EPOCHS)
  cohorts = ditto.build_cohort_personalization(
      task.tff_model_fn(), LAMBDAS, LR, task.batch_size, EPOCHS)
  return per_client, cohorts


def _clients(task, ids, poison=None):
  """Shuffled (x, y) with unequal sizes (some not a multiple of the batch
  size) and both groups."""
  arrays, groups = [], []
  for i in ids:
    x, y = task.shuffled_train(task.client_ids[i], seed=i)
    keep = len(x) - 3 * i
    x, y = x[:keep].copy(), y[:keep]
    if i == poison:
      x[:] = np.nan
    arrays.append((x, y))
    groups.append(EYE[int(i % 3 == 0)])
  return arrays, groups


def _global(round_num):
  rng = np.random.default_rng(round_num)
  return tff.learning.models.ModelWeights(
      [rng.normal(scale=0.3, size=(64, 10)).astype(np.float32),
       rng.normal(scale=0.1, size=10).astype(np.float32)], [])


def _per_client(task, step, global_weights, personal, arrays, groups):
  data = [client_work.make_client_data(
      tf.data.Dataset.from_tensor_slices(a).batch(task.batch_size), g)
          for a, g in zip(arrays, groups)]
  return [[np.asarray(w) for w in m]
          for m in step(global_weights, personal, data)]


def _cohorts(step, global_weights, personal, arrays, groups, sizes, pad):
  """Cohorts of `sizes` clients, each with `pad` padding slots whose
  personal models are sevens (they must come back unchanged)."""
  data, stacked, start = [], [], 0
  filler = [np.full_like(w, 7.0) for w in personal[0]]
  for k in sizes:
    data.append(cohort.pack_cohort(arrays[start:start + k],
                                   groups[start:start + k], 2, k + pad))
    stacked += ditto.stack_personal(personal[start:start + k] + [filler] * pad,
                                    [k + pad])
    start += k
  out = ditto.unstack_personal(step(global_weights, stacked, data))
  real, start = [], 0
  for k in sizes:
    real += out[start:start + k]
    for m in out[start + k:start + k + pad]:
      for w, f in zip(m, filler):
        np.testing.assert_array_equal(w, f)
    start += k + pad
  return real


def test_cohort_ditto_equals_per_client_ditto(task, steps):
  per_client, cohorts = steps
  stores = [ditto.PersonalModels(), ditto.PersonalModels()]
  # Round 2 has clients seen in round 1 and first-time ones, in other slots.
  for round_num, ids in enumerate([[0, 1, 2, 3, 4], [6, 3, 5, 0, 2, 1]]):
    global_weights = _global(round_num)
    arrays, groups = _clients(task, ids)
    assert {len(a[0]) for a in arrays} != 1
    names = [task.client_ids[i] for i in ids]
    out_pc = _per_client(
        task, per_client, global_weights,
        [stores[0].get(c, global_weights.trainable) for c in names], arrays,
        groups)
    sizes = cohort.split_sizes(len(ids), 4)
    out_co = _cohorts(
        cohorts, global_weights,
        [stores[1].get(c, global_weights.trainable) for c in names], arrays,
        groups, sizes, pad=1)
    stores[0].update(names, out_pc)
    stores[1].update(names, out_co)
    for c in names:
      for a, b in zip(stores[0].get(c, []), stores[1].get(c, [])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # The steps did something and lambda told the groups apart.
  moved = [np.linalg.norm(stores[0].get(task.client_ids[i], [])[0] -
                          _global(1).trainable[0]) for i in (0, 1)]
  assert 0 < moved[0] < moved[1]  # client 0 is in group 1 (lambda 3.0)


def test_non_finite_client_keeps_its_personal_model(task, steps):
  per_client, cohorts = steps
  global_weights = _global(0)
  ids = [0, 1, 2, 3]
  arrays, groups = _clients(task, ids, poison=2)
  rng = np.random.default_rng(5)
  personal = [[rng.normal(size=w.shape).astype(np.float32)
               for w in global_weights.trainable] for _ in ids]
  out_co = _cohorts(cohorts, global_weights, personal, arrays, groups, [4],
                    pad=0)
  out_pc = _per_client(task, per_client, global_weights, personal, arrays,
                       groups)
  for w, p in zip(out_co[2], personal[2]):
    np.testing.assert_array_equal(w, p)
  for i in (0, 1, 3):
    assert not np.allclose(out_co[i][0], personal[i][0])
    for a, b in zip(out_co[i], out_pc[i]):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_cohorts_stepped_side_by_side_equal_cohorts_one_at_a_time(task):
  ids = list(range(7))
  arrays, groups = _clients(task, ids)
  global_weights = _global(0)
  personal = [list(global_weights.trainable) for _ in ids]
  sizes = [2, 1, 2, 1, 1]  # 3 threads: thread 0 steps cohorts 0 and 3
  results = []
  for threads in (1, 3):
    step = ditto.build_cohort_personalization(
        task.tff_model_fn(), LAMBDAS, LR, task.batch_size, EPOCHS,
        threads=threads)
    results.append(_cohorts(step, global_weights, personal, arrays, groups,
                            sizes, pad=0))
  for one, side_by_side, start in zip(*results, personal):
    assert not np.array_equal(one[0], start[0])
    for a, b in zip(one, side_by_side):
      np.testing.assert_array_equal(a, b)


def test_run_with_ditto_in_cohorts_matches_per_client_run(task, tmp_path):
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', 8.0, 1e-4)], 0.3, seed=0)
  summaries, weights, stores = [], [], []
  for cohort_size in (0, 3):
    settings = trusted_setting.Settings(
        rounds=2, sampling=accounting.PoissonSampling(0.5),
        clip=plans.ClipSettings(initial_norm=0.5, count_stddev=2.0),
        eval_every=2, checkpoint_every=2, local_epochs=2,
        ditto=trusted_setting.DittoSettings(0.1, 1.0, 0.2),
        cohort_size=cohort_size, unsafe_seeded_dp_randomness=True,
        release_unprotected_stats=True)
    out = tmp_path / str(cohort_size)
    summary, w = trusted_setting.run_configuration(
        task, trusted_setting.Configuration('fedhdp', 0.5), choices, settings,
        str(out), progress=False)
    summaries.append(summary['metrics'])
    weights.append(w)
    # Single-digit clients' Acc_l saturates: compare the saved models too.
    [path] = out.glob('**/personal_round_2.npz')
    stores.append(ditto.PersonalModels.load(str(path), task.client_ids))
  for a, b in zip(weights[0].trainable, weights[1].trainable):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
  for key in ('acc_l_p', 'var_l_p', 'acc_l_np', 'var_l_np', 'delta_l'):
    assert summaries[0][key] == pytest.approx(summaries[1][key], abs=1e-6)
  assert len(stores[0]) == len(stores[1]) > 0
  for c in task.client_ids:
    assert (c in stores[0]) == (c in stores[1])
    for a, b in zip(stores[0].get(c, []), stores[1].get(c, [])):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
