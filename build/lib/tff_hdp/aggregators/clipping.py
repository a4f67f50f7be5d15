"""Clipping that keeps every contribution inside the clip ball.

DP's sensitivity bound needs each client's update (FedHDP) or each example's
gradient (DP-SGD) to add at most the clip norm to a sum, whatever its values.
`tf.clip_by_global_norm` returns NaN for a non-finite norm, and NaN times a
zero factor is still NaN; these two ops are what both the aggregators and
DP-SGD use instead.
"""

from __future__ import annotations

import tensorflow as tf


def safe_clip_scale(norms, clip_norm):
  """Per-norm clip factors `c / max(norm, c)` and whether each norm is finite.

  A NaN or inf entry, or finite entries whose squares overflow, make a norm
  non-finite: that contribution counts as infinitely large, gets factor 0 and
  must add exactly zero, so also zero its rows with `zero_rows` (NaN times 0
  is NaN).
  """
  finite = tf.math.is_finite(norms)
  scale = tf.where(finite, clip_norm / tf.maximum(norms, clip_norm),
                   tf.zeros_like(norms))
  return scale, finite


def zero_rows(x, keep):
  """`x` with zeros where `keep`, over its leading dimensions, is False."""
  shape = tf.concat(
      [tf.shape(keep), tf.ones([tf.rank(x) - tf.rank(keep)], tf.int32)], 0)
  return tf.where(tf.reshape(keep, shape), x, tf.zeros_like(x))


def zero_unless(condition, structure):
  """The nested `structure`, or zeros of its shapes where the scalar
  `condition` is False (a dropped client's update and weight)."""
  return tf.nest.map_structure(
      lambda x: tf.where(condition, x, tf.zeros_like(x)), structure)


def all_finite(structure) -> tf.Tensor:
  """Whether every value of the nested `structure` is finite."""
  return tf.reduce_all(
      [tf.reduce_all(tf.math.is_finite(x)) for x in tf.nest.flatten(structure)])


def centred_clip_bits(norms, clip_norm):
  """Each update's answer to adaptive clipping's count of unclipped updates,
  centred: +1/2 for a norm within `clip_norm`, -1/2 for a clipped (or
  non-finite) one, and 0 for an update of norm 0.

  The accounting gives the count sensitivity 1/2. Under zero-out adjacency
  a device's updates are replaced by zeros: had a zero update answered
  "unclipped" (+1/2), the count would move by 1 against the device's
  clipped update. A zero update answers nothing, so the count moves by at
  most 1/2 whether the device is removed or zeroed out.
  """
  answers = tf.cast(norms <= clip_norm, tf.float32) - 0.5
  return tf.where(tf.equal(norms, 0.0), tf.zeros_like(answers), answers)


def clip_rows(leaves, clip_norm):
  """Each row (leading index) of the stacked `leaves` clipped to `clip_norm`
  over all leaves, a row with a non-finite norm zeroed; and the rows'
  norms."""
  squares = [tf.reduce_sum(tf.reshape(tf.square(x), [tf.shape(x)[0], -1]),
                           axis=1) for x in leaves]
  norms = tf.sqrt(tf.add_n(squares))
  scale, finite = safe_clip_scale(norms, clip_norm)
  return [zero_rows(x, finite) * tf.reshape(scale, [-1] + [1] *
                                            (x.shape.rank - 1))
          for x in leaves], norms
