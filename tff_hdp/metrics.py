"""The one record per metric a task can report: how a client's test example
is scored, which way is better, and how tables label it.

Evaluation, the cross-silo methods' cluster selection (IFCA picks the cluster
with the lowest per-example error), sweeps that pick the best setting, the
CLI's tables and the papers' claims all read the record, so a new metric is
one entry here.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
  import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Metric:
  """`score(outputs, y)`: each example's score (numpy); `per_example_error`
  (TF, or None): 1 for a wrong prediction, for private cluster selection."""

  name: str
  label: str  # what a table's header says
  higher_is_better: bool
  score: Callable[[np.ndarray, np.ndarray], np.ndarray]
  per_example_error: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None

  def better(self, a: float, b: float) -> bool:
    """Whether value `a` beats `b`."""
    return a > b if self.higher_is_better else a < b


def _accuracy(outputs, y):
  return (outputs.argmax(axis=-1) == y).astype(np.float64) * 100.0


def _sign_accuracy(outputs, y):
  outputs = outputs.reshape(y.shape)
  return (np.where(outputs >= 0, 1, -1) == y).astype(np.float64) * 100.0


def _squared_error(outputs, y):
  return np.square(outputs.reshape(y.shape) - y).astype(np.float64)


# TensorFlow only where a graph is scored: the reporting tools read these
# records (labels, which way is better) without importing it.


def _argmax_error(y, p):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.not_equal(tf.argmax(p, axis=-1, output_type=tf.int32),
                      tf.cast(tf.reshape(y, [-1]), tf.int32))


def _sign_error(y, p):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.not_equal(tf.where(tf.reshape(p, [-1]) >= 0, 1.0, -1.0),
                      tf.cast(tf.reshape(y, [-1]), tf.float32))


METRICS = {m.name: m for m in (
    Metric('accuracy', 'accuracy (%)', True, _accuracy, _argmax_error),
    Metric('sign_accuracy', 'accuracy (%)', True, _sign_accuracy, _sign_error),
    Metric('mse', 'MSE', False, _squared_error, None),
)}


# The columns (rounds.csv, results.csv, summary.json's metrics) of privacy
# group g's Acc_g on the server's test examples of its public labels, and of
# the worst group's: named apart from Acc_g,p and Acc_g,np whatever g is.
GROUP_COLUMN = 'acc_g_group_{group}'
WORST_GROUP_COLUMN = 'acc_g_worst'


def get(name: str) -> Metric:
  """The record of metric `name`; an unknown name is a ValueError."""
  if name not in METRICS:
    raise ValueError(f'unknown metric {name!r}; choose from {tuple(METRICS)}.')
  return METRICS[name]
