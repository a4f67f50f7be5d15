"""FedHDP's per-group DP aggregation in a plain TFF program: your own Keras
model and ClientData, TFF's own learning process, this library's server rule
and accountant.

Two privacy levels (eps 1 and eps 4 at delta 1e-3) and a group that opted
out; each group's noise multiplier is calibrated for its target, the
aggregate is `HeterogeneousDPFactory.gaussian_adaptive`, and the process is
`build_group_weighted_fed_avg`, TFF's FedAvg whose clients send their
(public) group with their data:

  .venv/bin/python examples/stock_tff.py --rounds=5
"""

import collections

import tff_hdp  # noqa: F401  (first: it quiets TensorFlow's start-up log)

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import HeterogeneousDPFactory
from tff_hdp.learning import group_fed_avg
from tff_hdp.privacy import accounting
from tff_hdp.simulation import runtime

_ROUNDS = flags.DEFINE_integer('rounds', 5, 'Training rounds.')

TARGETS = [(1.0, 1e-3), (4.0, 1e-3), None]  # per group; None: opted out
CLIENTS_PER_GROUP = 30
SAMPLING_RATE = 0.5


def client_data() -> tff.simulation.datasets.ClientData:
  """The user's own ClientData: 90 clients of 2-feature regression."""
  rng = np.random.default_rng(0)
  truth = np.array([[1.0], [-2.0]], np.float32)
  examples = {}
  for i in range(3 * CLIENTS_PER_GROUP):
    x = rng.normal(size=(10, 2)).astype(np.float32)
    examples[f'client{i:02d}'] = collections.OrderedDict(
        x=x, y=x @ truth + rng.normal(scale=0.1, size=(10, 1)).astype(
            np.float32))
  return tff.simulation.datasets.TestClientData(examples)


def preprocess(dataset: tf.data.Dataset) -> tf.data.Dataset:
  return dataset.batch(5).map(lambda e: (e['x'], e['y']))


def main(argv):
  del argv
  runtime.init()  # TFF's C++ runtime, on a worker that ends with this process
  data = client_data()
  ids = data.client_ids
  group_of = {c: i // CLIENTS_PER_GROUP for i, c in enumerate(ids)}  # public
  spec = preprocess(data.create_tf_dataset_for_client(ids[0])).element_spec

  def model_fn():
    keras = tf.keras.Sequential([tf.keras.layers.Dense(
        1, input_shape=(2,), kernel_initializer='zeros')])
    return tff.learning.models.from_keras_model(
        keras, loss=tf.keras.losses.MeanSquaredError(), input_spec=spec)

  # Each private group's noise for its target over the run (z_b: the
  # clip-count noise, which protects every group's clip bits too).
  expected = [SAMPLING_RATE * CLIENTS_PER_GROUP] * len(TARGETS)
  count_stddev = 0.05 * sum(expected)
  sampling = accounting.PoissonSampling(SAMPLING_RATE)
  noise = [0.0 if t is None else accounting.calibrate_noise_multiplier(
      t[0], t[1], sampling, _ROUNDS.value, count_stddev) for t in TARGETS]
  aggregator = HeterogeneousDPFactory.gaussian_adaptive(
      noise, expected, ratios=[1.0, 1.0, 1.0], initial_l2_norm_clip=1.0,
      clipped_count_stddev=count_stddev)
  process = group_fed_avg.build_group_weighted_fed_avg(
      model_fn, tff.learning.optimizers.build_sgdm(0.1),
      num_groups=len(TARGETS), model_aggregator=aggregator,
      # The clients' training metrics are exact: release none of them.
      metrics_aggregator=lambda *_: lambda *_: tff.federated_value(
          collections.OrderedDict(), tff.SERVER))
  state = process.initialize()
  rng = np.random.default_rng()  # the sampling, like the noise, is secret
  for round_num in range(1, _ROUNDS.value + 1):
    sampled = [c for c in ids if rng.random() < SAMPLING_RATE]
    state, metrics = process.next(state, [
        group_fed_avg.attach_group(
            preprocess(data.create_tf_dataset_for_client(c)), group_of[c],
            len(TARGETS))
        for c in sampled])
    spent = [None if t is None else accounting.epsilon_spent(
        z, count_stddev, sampling, round_num, t[1])
             for z, t in zip(noise, TARGETS)]
    print(f'round {round_num}: clip norm '
          f"{float(metrics['aggregator']['clip_norm']):.3f}, eps spent "
          + ', '.join('-' if e is None else f'{e:.3f}' for e in spent))
  weights = process.get_model_weights(state).trainable
  print('final model:', np.round(np.ravel(weights[0]), 3))


if __name__ == '__main__':
  app.run(main)
