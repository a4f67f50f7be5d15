"""Canary clients: their updates, and their scores against released models.

A canary is a member of a private group whose update is a fixed direction
v_c scaled far past any clip norm, so the aggregator clips it to S and noises
it like any member's (one-shot empirical privacy estimation, Andrew et al.,
ICLR 2024). v_c = s * h_r(c) / sqrt(d): s are random signs drawn from the
canary seed, h_r the r-th row of the Sylvester-Hadamard matrix of the next
power of two m >= d (entry (r, i) is (-1)^popcount(r & i)), cut to the
model's d parameters, and r(c) distinct rows drawn at random from [0, m).
So every v_c is a uniformly random sign vector of norm exactly 1, and two
canaries' inner product is a partial sum of one Walsh function, at most
2^k / d for k the lowest bit where their rows differ. Random rows give
those sums random signs: consecutive rows would give them one sign and push
every inserted canary's score up together (measured: +6.5% of a canary's
own signal with 4,000 canaries in 38,410 parameters; an affine map of the
index still left a -5% shift of the unseen ones).

The point of this construction is the score: the cosines of one model delta
with every canary are one fast Walsh-Hadamard transform of s * delta,
O(m log m) whatever the number of canaries. Scoring 2,000 canaries against
every round's model costs a transform per round, and nothing of size
d x canaries is ever built or stored. A canary client is sent its row r(c).
"""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

CANARY_KEY = 'canary'
NOT_A_CANARY = -1
# A canary's update norm: past any clip norm a run reaches, so that the
# aggregator always scales it down to S.
CANARY_NORM = 1e6
MAX_COSINES_KEY = 'canary_max_cosines'
LEARNING_STATE_KEY = 'learning'


def fast_walsh_hadamard(x: tf.Tensor) -> tf.Tensor:
  """H x for the Sylvester-Hadamard H of len(x), a power of two, unscaled:
  (H x)_c = sum_i (-1)^popcount(c & i) x_i. log2(len(x)) butterfly stages."""
  m = x.shape[0]
  h = 1
  while h < m:
    pairs = tf.reshape(x, [m // (2 * h), 2, h])
    a, b = pairs[:, 0, :], pairs[:, 1, :]
    x = tf.reshape(tf.stack([a + b, a - b], axis=1), [m])
    h *= 2
  return x


@dataclasses.dataclass(frozen=True)
class CanaryDirections:
  """`count` canary directions in a model of `num_params` parameters.

  Directions, updates and scores are TF ops; a direction derives from `seed`
  and its Hadamard row alone, so a worker builds a canary's update on the
  fly from the row it is sent.
  """

  seed: int
  num_params: int
  count: int

  def __post_init__(self):
    if self.num_params < 2:
      raise ValueError(f'canaries need a model of >= 2 parameters, got '
                       f'{self.num_params}.')
    if not 0 < self.count <= self.padded_size:
      raise ValueError(
          f'{self.count} canaries do not fit a model of {self.num_params} '
          f'parameters (at most {self.padded_size}).')

  @property
  def padded_size(self) -> int:
    return 1 << (self.num_params - 1).bit_length()

  def hadamard_rows(self) -> np.ndarray:
    """r(c) for every canary c: distinct rows of [0, m), int32 [count]."""
    rng = np.random.default_rng([self.seed, 0x524f57])
    return rng.choice(self.padded_size, self.count,
                      replace=False).astype(np.int32)

  def signs(self) -> tf.Tensor:
    """s, the float32 [d] random signs every direction shares."""
    u = tf.random.stateless_uniform([self.num_params],
                                    seed=[self.seed, 0x43414e])
    return tf.where(u < 0.5, -1.0, 1.0)

  def _directions(self, rows) -> tf.Tensor:
    """v_r for int32 `rows` of any shape: shape + [d]."""
    rows = tf.cast(rows, tf.int32)
    index = tf.range(self.num_params, dtype=tf.int32)
    bits = tf.raw_ops.PopulationCount(
        x=tf.bitwise.bitwise_and(rows[..., None], index))
    walsh = 1.0 - 2.0 * tf.cast(bits % 2, tf.float32)
    return self.signs() * walsh / math.sqrt(self.num_params)

  def direction(self, row) -> tf.Tensor:
    """The direction of Hadamard row `row` (an r(c)), float32 [d], unit
    norm."""
    return self._directions(row)

  def update(self, row, like) -> list[tf.Tensor]:
    """The update of the canary of Hadamard row `row`: -CANARY_NORM v_row
    cut into the shapes of the tensors of `like` (a model's trainable
    weights, in their order). Updates are pseudo-gradients (TFF's initial -
    local), so the server moves the model along +v_row: a canary raises its
    own cosine."""
    return [u[0] for u in self.stacked_updates(tf.reshape(row, [1]), like)]

  def stacked_updates(self, rows, like) -> list[tf.Tensor]:
    """`update` of every row of int32 [K] `rows` at once, stacked: [K] +
    each tensor's shape (a cohort of canaries)."""
    flat = -CANARY_NORM * self._directions(rows)
    sizes = [int(np.prod(t.shape)) for t in like]
    return [tf.reshape(part, [-1] + t.shape.as_list())
            for part, t in zip(tf.split(flat, sizes, axis=1), like)]

  def gradient_sum(self, rows, like) -> list[tf.Tensor]:
    """sum_r v_r over int32 [k] `rows` (k may be 0), cut into the shapes of
    the tensors of `like`: the clipped gradients of k canary examples, per
    unit of clip norm. With m = 2^(a + b) and index i = i_a 2^b + i_b,
    h_r = h_(r_a) (x) h_(r_b) (the Sylvester matrix is a Kronecker power), so
    the sum is one [2^a, k] x [k, 2^b] product of rows of two small Hadamard
    matrices: about k m multiply-adds, none of them a d-sized loop per
    canary."""
    bits = self.padded_size.bit_length() - 1
    low = bits // 2
    rows = tf.cast(rows, tf.int32)
    outer = tf.matmul(
        tf.gather(_sylvester(bits - low), tf.bitwise.right_shift(rows, low)),
        tf.gather(_sylvester(low), tf.bitwise.bitwise_and(rows,
                                                          (1 << low) - 1)),
        transpose_a=True)
    total = self.signs() * tf.reshape(outer, [-1])[:self.num_params] / (
        math.sqrt(self.num_params))
    sizes = [int(np.prod(t.shape)) for t in like]
    return [tf.reshape(part, t.shape)
            for part, t in zip(tf.split(total, sizes), like)]

  def dots(self, delta, rows=None) -> tf.Tensor:
    """<delta, v_r> for int32 `rows` (None: every canary's r(c)), float32;
    `delta` a model delta (trainable tensors in order). One transform."""
    flat = _flat(delta)
    padded = tf.pad(self.signs() * flat,
                    [[0, self.padded_size - self.num_params]])
    return tf.gather(fast_walsh_hadamard(padded),
                     self.hadamard_rows() if rows is None else rows
                     ) / math.sqrt(self.num_params)

  def cosines(self, delta) -> tf.Tensor:
    """cos(delta, v_c) for every canary c, float32 [count]; `delta` a model
    delta (trainable tensors in order). A zero delta scores 0."""
    norm = tf.norm(_flat(delta))
    return tf.where(norm > 0, self.dots(delta) / tf.maximum(norm, 1e-30), 0.0)


def _sylvester(bits: int) -> tf.Tensor:
  """The float32 Sylvester-Hadamard matrix of order 2^bits."""
  index = tf.range(1 << bits, dtype=tf.int32)
  parity = tf.raw_ops.PopulationCount(
      x=tf.bitwise.bitwise_and(index[:, None], index[None, :])) % 2
  return 1.0 - 2.0 * tf.cast(parity, tf.float32)


def _flat(tensors) -> tf.Tensor:
  """The float32 concatenation of `tensors`, flattened, in order."""
  return tf.concat([tf.reshape(tf.cast(t, tf.float32), [-1])
                    for t in tensors], axis=0)


@dataclasses.dataclass(frozen=True)
class ExampleCanaries:
  """`per_client` (K) canary examples in each of `num_clients` DP-SGD
  clients (or silos), for the threat model of a server that sees every
  update a client sends. Client i's are directions 2Ki .. 2Ki + K - 1,
  inserted into its data, and the next K, never inserted; distinct clients
  have distinct directions. A canary example's gradient is CANARY_NORM v,
  so DP-SGD clips it to exactly c v whatever the model; it joins a step with
  the client's sampling rate, like each of its examples."""

  directions: CanaryDirections
  per_client: int
  num_clients: int

  @classmethod
  def create(cls, seed: int, num_params: int, per_client: int,
             num_clients: int) -> 'ExampleCanaries':
    if per_client < 2:
      raise ValueError(f'--canaries must be >= 2 (an estimate needs two '
                       f'scores a side), got {per_client}.')
    count = 2 * per_client * num_clients
    padded = 1 << (num_params - 1).bit_length()
    if count > padded:
      room = padded // (2 * num_clients)
      raise ValueError(
          f'--canaries={per_client}: {num_clients} clients need '
          f'{count} canary directions, more than the {padded} a model of '
          f'{num_params} parameters has; ' + (
              f'at most {room} per client.' if room >= 2 else
              'too few for two per client: this model cannot be audited '
              'with canary examples.'))
    return cls(CanaryDirections(seed, num_params, count), per_client,
               num_clients)

  def rows(self, index) -> tf.Tensor:
    """int32 [2, K]: client `index`'s inserted rows, then its unseen ones."""
    table = tf.constant(self.directions.hadamard_rows().reshape(
        [self.num_clients, 2, self.per_client]))
    return tf.gather(table, index)


def replace_if_canary(directions: CanaryDirections, row, update):
  """`update` (a list of tensors), or the update of the canary of Hadamard
  row `row` if row >= 0."""
  return tf.cond(row >= 0, lambda: directions.update(row, update),
                 lambda: list(update))


def track_scores(process: tff.learning.templates.LearningProcess,
                 directions: CanaryDirections
                 ) -> tff.learning.templates.LearningProcess:
  """`process` whose state also keeps every canary's largest cosine with any
  round's model delta (the statistic when all iterates are released), so a
  resumed run continues the same maxima.

  State: OrderedDict(learning=`process`'s state, canary_max_cosines=float32
  [count], -inf before the first round); metrics are `process`'s.
  """
  weights_type = process.get_model_weights.type_signature.result

  @tff.tensorflow.computation
  def no_scores():
    return tf.fill([directions.count], -np.inf)

  @tff.federated_computation
  def initialize_fn():
    return tff.federated_zip(collections.OrderedDict([
        (LEARNING_STATE_KEY, process.initialize()),
        (MAX_COSINES_KEY, tff.federated_eval(no_scores, tff.SERVER))]))

  state_type = initialize_fn.type_signature.result.member
  scores_type = state_type[MAX_COSINES_KEY]

  @tff.tensorflow.computation(weights_type, weights_type, scores_type)
  def keep_max(before, after, best):
    delta = [a - b for a, b in zip(tf.nest.flatten(after.trainable),
                                   tf.nest.flatten(before.trainable))]
    return tf.maximum(best, directions.cosines(delta))

  @tff.federated_computation(initialize_fn.type_signature.result,
                             process.next.type_signature.parameter[1])
  def next_fn(state, client_data):
    before = tff.federated_map(process.get_model_weights,
                               state[LEARNING_STATE_KEY])
    output = process.next(state[LEARNING_STATE_KEY], client_data)
    after = tff.federated_map(process.get_model_weights, output.state)
    best = tff.federated_map(keep_max,
                             (before, after, state[MAX_COSINES_KEY]))
    new_state = tff.federated_zip(collections.OrderedDict([
        (LEARNING_STATE_KEY, output.state), (MAX_COSINES_KEY, best)]))
    return tff.learning.templates.LearningProcessOutput(new_state,
                                                        output.metrics)

  @tff.tensorflow.computation(state_type)
  def get_model_weights(state):
    return process.get_model_weights(state[LEARNING_STATE_KEY])

  @tff.tensorflow.computation(state_type, weights_type)
  def set_model_weights(state, weights):
    return collections.OrderedDict([
        (LEARNING_STATE_KEY,
         process.set_model_weights(state[LEARNING_STATE_KEY], weights)),
        (MAX_COSINES_KEY, state[MAX_COSINES_KEY])])

  return tff.learning.templates.LearningProcess(
      initialize_fn, next_fn, get_model_weights, set_model_weights)
