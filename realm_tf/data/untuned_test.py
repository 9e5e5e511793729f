"""Tests of realm_tf.data.untuned: its pipelines start no autotuning thread and keep their elements."""

import os

import tensorflow as tf

from realm_tf.data import untuned


def _pipeline() -> tf.data.Dataset:
  return tf.data.Dataset.range(100).map(lambda x: x * 2).prefetch(2)


def _threads_started(dataset: tf.data.Dataset) -> int:
  """Threads this process gained while an iterator of dataset was live and had made two elements."""
  before = len(os.listdir("/proc/self/task"))
  iterator = iter(dataset)
  next(iterator)
  next(iterator)
  started = len(os.listdir("/proc/self/task")) - before
  del iterator
  return started


class UntunedTest(tf.test.TestCase):

  def test_the_elements_are_those_of_the_pipeline(self):
    self.assertEqual(list(untuned.untuned(_pipeline()).as_numpy_iterator()), list(range(0, 200, 2)))
    self.assertIs(untuned.untuned(_pipeline()).options().autotune.enabled, False)

  def test_its_iterators_start_no_autotuning_thread(self):
    # The thread whose missed wake-up stalled the deletion of an autotuned iterator (the module's
    # docstring): an autotuned pipeline's iterator starts it beside the prefetch threads, an untuned
    # one does not. TensorFlow's shared pools are started first, so that they count for neither.
    _threads_started(_pipeline())
    _threads_started(untuned.untuned(_pipeline()))
    self.assertLess(_threads_started(untuned.untuned(_pipeline())), _threads_started(_pipeline()))


if __name__ == "__main__":
  tf.test.main()
