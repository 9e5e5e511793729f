"""Input pipelines without tf.data's autotuning thread, so that deleting their iterator never stalls.

Why: with autotuning on (tf.data's default) every iterator starts a model thread that re-tunes the
pipeline at periods that double up to a minute, and the iterator's destructor cancels that thread and
waits for it. TensorFlow 2.20 wakes the thread before it marks the cancellation done; a thread that runs
first in that window sees no cancellation and sleeps out the rest of its period, and the destructor waits
with it. bin/train_realm sat 48.6 s and 108 s between its last step and its TRAINING_DONE marker (the
stack: the loop's final gc.collect, in RootDataset::Iterator's destructor joining that thread), and a
small pipeline read for 12 s then deleted waited 8.46 s in 3 of 25 tries, and never with autotuning off
(docs/reliability.md, "Bugs these tests found").

realm_tf's pipelines tune nothing: they prefetch a fixed 2 batches, and the one parallel map (ICT's)
runs at tf.data's starting parallelism for AUTOTUNE when autotuning is off (measured on 2 cores: 40
elements that each sleep 0.05 s took 1.02 s untuned and 1.04 s autotuned, against 2 s one at a time).
"""

import tensorflow as tf


def untuned(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """dataset with autotuning off (its iterators start no model thread); the elements are unchanged."""
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)
