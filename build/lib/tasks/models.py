"""Keras models of the papers' tasks that more than one task module builds.

Image models take the
flat 784-pixel vectors every image task stores and reshape them, so one client
array layout serves the dense models and the CNNs alike.
"""

from __future__ import annotations

import tensorflow as tf

IMAGE_PIXELS = 28 * 28


def softmax_regression(num_features: int, num_classes: int) -> tf.keras.Model:
  """Multinomial logistic regression: the small convex model of the tests."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(num_features,)),
      tf.keras.layers.Dense(num_classes, kernel_initializer='zeros'),
  ])


HIDDEN_UNITS = 200


def one_layer_nn(num_features: int, num_classes: int,
                 hidden_units: int = HIDDEN_UNITS) -> tf.keras.Model:
  """The '1-layer NN' of the FeO2 MNIST/FMNIST experiments: one ReLU hidden layer.

  The papers do not print its width. Softmax regression cannot be it: trained
  centrally it stays below the papers' federated non-private accuracy, and its
  DP cost is a fifth of theirs (RESULTS.md §1). One hidden layer of 200 units
  reproduces both.
  """
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(num_features,)),
      tf.keras.layers.Dense(hidden_units, activation='relu'),
      tf.keras.layers.Dense(num_classes),
  ])


def _image_input() -> list[tf.keras.layers.Layer]:
  return [tf.keras.layers.InputLayer(input_shape=(IMAGE_PIXELS,)),
          tf.keras.layers.Reshape((28, 28, 1))]


def feo2_cnn(num_classes: int) -> tf.keras.Model:
  """FeO2's "2-layer CNN" for FEMNIST.

  The paper names only the layer count; this is the standard 2-layer CNN of
  federated EMNIST (McMahan et al. 2017, TFF's EMNIST tutorials): two 5x5
  convolutions (32, 64 channels, 'same' padding, ReLU), each followed by 2x2
  max pooling, a 512-unit ReLU layer and the logits.
  """
  return tf.keras.Sequential(_image_input() + [
      tf.keras.layers.Conv2D(32, 5, padding='same', activation='relu'),
      tf.keras.layers.MaxPool2D(2),
      tf.keras.layers.Conv2D(64, 5, padding='same', activation='relu'),
      tf.keras.layers.MaxPool2D(2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(512, activation='relu'),
      tf.keras.layers.Dense(num_classes),
  ])


def mrmtl_convnet(num_classes: int) -> tf.keras.Model:
  """The MR-MTL paper's ConvNet (its Appendix C.1), no padding.

  Conv 3x3 (32 channels), ReLU, 2x2 max pool stride 2, conv 3x3 (64), ReLU,
  2x2 max pool stride 2, linear logits.
  """
  return tf.keras.Sequential(_image_input() + [
      tf.keras.layers.Conv2D(32, 3, activation='relu'),
      tf.keras.layers.MaxPool2D(2, strides=2),
      tf.keras.layers.Conv2D(64, 3, activation='relu'),
      tf.keras.layers.MaxPool2D(2, strides=2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(num_classes),
  ])


def linear(num_features: int) -> tf.keras.Model:
  """One linear output with bias: linear regression or a linear SVM."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(num_features,)),
      tf.keras.layers.Dense(1, kernel_initializer='zeros'),
  ])
