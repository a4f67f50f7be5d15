"""A new untrusted-server rule with an option, from user code.

The coordinate-wise trimmed mean: in every coordinate, drop the largest and
smallest `trim_fraction` of the round's updates and average the rest. Each
update is already private (DP-SGD at its client's own epsilon), so the rule
is post-processing and costs no privacy. Its record declares the option, so
the command line has `--trim_fraction` (checked in [0, 0.5), refused when no
chosen rule reads it) and passes it to the factory:

  .venv/bin/python examples/untrusted_rule.py --algorithms=trimmed_mean,weiavg \
      --trim_fraction=0.2 --num_clients=10 --rounds=5 --output_dir=/tmp/trim
"""

import tff_hdp  # noqa: F401  (first: it quiets TensorFlow's start-up log)

import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import stacking
from tff_hdp.learning import algorithms
from tff_hdp.privacy.release_policy import Measurement


class TrimmedMeanFactory(tff.aggregators.UnweightedAggregationFactory):
  """The mean of each coordinate's middle values, `trim_fraction` of the
  clients dropped at each end; measures how many it kept."""

  def __init__(self, trim_fraction: float = 0.1):
    if not 0 <= trim_fraction < 0.5:
      raise ValueError(f'trim_fraction must be in [0, 0.5), got '
                       f'{trim_fraction}.')
    self._trim = trim_fraction

  def create(self, value_type):
    value_type = tff.types.to_type(value_type)
    trim = self._trim

    def trimmed_mean(rows):
      n = tf.shape(rows)[0]
      cut = tf.cast(tf.math.floor(trim * tf.cast(n, tf.float32)), tf.int32)
      middle = tf.sort(rows, axis=0)[cut:n - cut]
      return tf.reduce_mean(middle, axis=0), {'clients_kept': n - 2 * cut}

    return stacking.stateless_rows_process(value_type, trimmed_mean)


RECORD = algorithms.Algorithm(
    'trimmed_mean', algorithms.UNTRUSTED, 'coordinate-wise trimmed mean',
    TrimmedMeanFactory,
    options=(algorithms.Option(
        'trim_fraction', 'trimmed_mean: the fraction of the updates dropped '
        'at each end of every coordinate.', default=0.1, low=0.0,
        high=0.49),),
    measurements=(Measurement('clients_kept', 'clients_kept', kind=int),))


if __name__ == '__main__':
  algorithms.register(RECORD)
  from tff_hdp.cli import run_experiment  # pylint: disable=g-import-not-at-top
  run_experiment.run()
