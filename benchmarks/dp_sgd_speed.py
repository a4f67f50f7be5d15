"""Examples per second of one DP-SGD step, three ways, on the same model.

  ours:       `tff_hdp.learning.dp_sgd.private_mean_gradient` in a `tf.function`
              (Dense/conv per-example gradients from one backward pass);
  TF Privacy: `DPKerasSGDOptimizer` with one microbatch per example;
  TF Privacy fast gradient clipping: the same model as a `DPSequential`
              (`make_dp_model_class`) with its default `layer_registry`
              (Dense and Embedding layers get their norms from one backward
              pass; it has no entry for Conv2D), with and without XLA;
  loop:       a Python loop over the examples, one tape each.

Same model, batch, clip norm and noise multiplier; each is timed over
`--steps` steps after one warm-up step (tracing).

  .venv/bin/python benchmarks/dp_sgd_speed.py --batch=64 --model=cnn
"""

from __future__ import annotations

import os
import sys
import time

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from tff_hdp.cli import entry  # noqa: E402

_BATCH = flags.DEFINE_integer('batch', 64, 'Examples per step.')
_STEPS = flags.DEFINE_integer('steps', 20, 'Timed steps per method.')
_MODEL = flags.DEFINE_enum(
    'model', 'nn', ['softmax', 'nn', 'cnn'],
    'softmax: softmax regression; nn: the 1-layer NN (one hidden layer); '
    'cnn: the FeO2 2-layer CNN.')
_CLIP = 1.0
_NOISE = 1.1
_LR = 0.1


def _model():
  from tff_hdp.tasks import models  # pylint: disable=g-import-not-at-top
  if _MODEL.value == 'cnn':
    return models.feo2_cnn(10)
  if _MODEL.value == 'softmax':
    return models.softmax_regression(models.IMAGE_PIXELS, 10)
  return models.one_layer_nn(models.IMAGE_PIXELS, 10)


def _timed(step, steps: int) -> float:
  step()
  start = time.perf_counter()
  for _ in range(steps):
    step()
  return (time.perf_counter() - start) / steps


def main(argv):
  del argv
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_privacy  # pylint: disable=g-import-not-at-top
  from tff_hdp.learning import dp_sgd  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top,g-multiple-import

  b = _BATCH.value
  rng = np.random.default_rng(0)
  x = tf.constant(rng.normal(size=(b, 784)).astype('float32'))
  y = tf.constant(rng.integers(10, size=b).astype('int32'))
  per_example = tf.keras.losses.SparseCategoricalCrossentropy(
      from_logits=True, reduction=tf.keras.losses.Reduction.NONE)

  ours = _model()
  seed = tf.Variable([0, 0], dtype=tf.int64)

  @tf.function
  def ours_step():
    grads, _ = dp_sgd.private_mean_gradient(
        lambda batch: per_example(batch[1], ours(batch[0], training=True)),
        (x, y), ours.trainable_variables, tf.constant(b), _CLIP, _NOISE,
        float(b), seed)
    for v, g in zip(ours.trainable_variables, grads):
      v.assign_sub(_LR * g)
    seed.assign_add([0, 1])

  theirs = _model()
  theirs.compile(
      optimizer=tensorflow_privacy.DPKerasSGDOptimizer(
          l2_norm_clip=_CLIP, noise_multiplier=_NOISE, num_microbatches=b,
          learning_rate=_LR),
      loss=per_example)

  def theirs_step():
    theirs.train_on_batch(x, y)

  paths = {}

  def fast_step_fn(use_xla: bool):
    from tensorflow_privacy.privacy.fast_gradient_clipping import layer_registry  # pylint: disable=g-import-not-at-top
    from tensorflow_privacy.privacy.keras_models import dp_keras_model  # pylint: disable=g-import-not-at-top
    model = _model()
    # With its input declared the model has the graph the fast path needs.
    fast = dp_keras_model.DPSequential(
        l2_norm_clip=_CLIP, noise_multiplier=_NOISE, use_xla=use_xla,
        layer_registry=layer_registry.make_default_layer_registry(),
        layers=[tf.keras.layers.InputLayer(input_shape=model.input_shape[1:])]
        + model.layers)
    paths[use_xla] = ('fast' if fast._enable_fast_peg_computation  # pylint: disable=protected-access
                      else 'fallback: per-example vectorized_map')
    fast.compile(optimizer=tf.keras.optimizers.SGD(_LR),
                 loss=tf.keras.losses.SparseCategoricalCrossentropy(
                     from_logits=True))
    return lambda: fast.train_on_batch(x, y)

  looped = _model()

  def loop_step():
    summed = [tf.zeros_like(v) for v in looped.trainable_variables]
    for i in range(b):
      with tf.GradientTape() as tape:
        loss = per_example(y[i:i + 1], looped(x[i:i + 1], training=True))
      grads = tape.gradient(loss, looped.trainable_variables)
      clipped, _ = tf.clip_by_global_norm(grads, _CLIP)
      summed = [s + g for s, g in zip(summed, clipped)]
    for v, s in zip(looped.trainable_variables, summed):
      v.assign_sub(_LR * (s + tf.random.normal(tf.shape(s)) * _NOISE * _CLIP)
                   / b)

  fast_plain, fast_xla = fast_step_fn(False), fast_step_fn(True)
  seconds = {
      'ours (vectorized, tf.function)': _timed(ours_step, _STEPS.value),
      'TF Privacy DPKerasSGDOptimizer': _timed(theirs_step, _STEPS.value),
      f'TF Privacy fast gradient clipping (DPSequential) [{paths[False]}]':
          _timed(fast_plain, _STEPS.value),
      f'TF Privacy fast gradient clipping, XLA [{paths[True]}]': _timed(
          fast_xla, _STEPS.value),
      'per-example Python loop': _timed(loop_step,
                                        max(1, _STEPS.value // 4)),
  }
  base = seconds['ours (vectorized, tf.function)']
  rows = [[name, f'{b / s:.0f}', f'{s * 1e3:.1f}', f'{s / base:.2f}']
          for name, s in seconds.items()]
  print(f'\nDP-SGD step, {_MODEL.value}, batch {b}:\n')
  print(tables.markdown_table(
      ['method', 'examples/s', 'ms/step', 'time vs ours'], rows))
  # Every step draws one model-sized Gaussian vector, whatever the batch: at
  # small batches this, not the gradients, bounds the step.
  num_params = sum(int(tf.size(v)) for v in ours.trainable_variables)
  draw = tf.function(lambda s: tf.reduce_sum(
      tf.random.stateless_normal([num_params], s)))
  noise = _timed(lambda: draw(seed), max(_STEPS.value, 50))
  print(f'\nNoise alone: {num_params} float32 normals per step take '
        f'{noise * 1e3:.2f} ms ({num_params / noise:.3g} normals/s), '
        f'{noise / base:.0%} of our step.')


if __name__ == '__main__':
  entry.run(main, __doc__)
