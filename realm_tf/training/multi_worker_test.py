"""--strategy=multi_worker_mirrored with two worker processes on localhost (TF_CONFIG).

Each worker process runs this file with --as_worker: it builds a tiny RealmPretrainer under
MultiWorkerMirroredStrategy (realm_tf.training.distribute), takes its half of each global batch, and runs
two TrainSteps. Both workers must report the same all-reduced losses, equal to one process training on the
same global batches (the loss is the mean over the masked tokens of the GLOBAL batch).

Cheap as the behaviour allows: two worker processes (the test process does not join the cluster, so
that other tests in it see no collective runtime), a 1-layer hidden-32 BERT, and no XLA: the workers'
step compiles nothing (train_lib_test compiles the same per-replica pass inside MirroredStrategy, the
all-reduce staying outside the compiled function under any strategy), and the one-process reference
runs eagerly while the workers start.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.modeling import bert
from realm_tf.modeling import realm as realm_model
from realm_tf.training import train_lib

_GLOBAL_BATCH = 4
_STEPS = 2


def _batches():
  """Two global batches with unequal mask counts per example (global-token normalization matters)."""
  rng = np.random.default_rng(7)
  b, n, q, c, m = _GLOBAL_BATCH * _STEPS, 3, 6, 8, 3
  features = {}
  for prefix, shape in ((realm_model.QUERY, [b, q]), (realm_model.CANDIDATE, [b, n, c]), (realm_model.JOINT,
                                                                                          [b, n, q + c])):
    features[f"{prefix}_token_ids"] = rng.integers(5, 60, shape).astype(np.int32)
    features[f"{prefix}_mask"] = np.ones(shape, np.int32)
    features[f"{prefix}_segment_ids"] = np.zeros(shape, np.int32)
  features[realm_model.MLM_POSITIONS] = rng.integers(1, q - 1, [b, m]).astype(np.int32)
  features[realm_model.MLM_TARGETS] = rng.integers(5, 60, [b, m]).astype(np.int32)
  mask = np.zeros([b, m], np.float32)
  for i in range(b):
    mask[i, :1 + i % 3] = 1.0
  features[realm_model.MLM_MASK] = mask
  return features


def _train(strategy, dataset) -> list:
  config = bert.tiny_config(60,
                            hidden_size=32,
                            num_layers=1,
                            intermediate_size=32,
                            hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0)
  with strategy.scope():
    tf_keras.utils.set_random_seed(3)
    model = realm_model.RealmPretrainer(config, projection_size=16)
    first = {k: v[:1] for k, v in _batches().items()}
    model(first)
    # Same starting weights in every process: deterministic values from a fixed generator.
    rng = np.random.default_rng(11)
    model.set_weights([rng.normal(0, 0.02, w.shape).astype(np.float32) for w in model.get_weights()])
    optimizer = tf_keras.optimizers.SGD(0.5)
    step = train_lib.TrainStep(model, optimizer, strategy, jit_compile=False)
  return [float(step(batch)["loss"]) for batch in dataset]


def _run_worker() -> None:
  from realm_tf.training import distribute  # pylint: disable=g-import-not-at-top
  strategy = distribute.get_strategy("multi_worker_mirrored")
  features = _batches()

  def dataset_fn(context: tf.distribute.InputContext):
    per_replica = context.get_per_replica_batch_size(_GLOBAL_BATCH)
    start = context.input_pipeline_id * per_replica
    global_batches = tf.data.Dataset.from_tensor_slices(features).batch(_GLOBAL_BATCH)
    return global_batches.map(lambda b: {k: v[start:start + per_replica] for k, v in b.items()})

  losses = _train(strategy, strategy.distribute_datasets_from_function(dataset_fn))
  print("LOSSES " + json.dumps(losses), flush=True)


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


class MultiWorkerTest(tf.test.TestCase):

  def test_two_workers_match_one_process(self):
    ports = [_free_port(), _free_port()]
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    workers = []
    for index in range(2):
      env = dict(os.environ,
                 PYTHONPATH=repo,
                 TF_CPP_MIN_LOG_LEVEL="3",
                 TF_USE_LEGACY_KERAS="1",
                 TF_CONFIG=json.dumps({
                     "cluster": cluster,
                     "task": {
                         "type": "worker",
                         "index": index
                     }
                 }))
      workers.append(
          subprocess.Popen([sys.executable, os.path.abspath(__file__), "--as_worker"],
                           stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT,
                           text=True,
                           env=env))
    try:
      # The reference: one process, the global batches, no strategy; eager (no tracing) while the
      # workers start.
      tf.config.run_functions_eagerly(True)
      try:
        single = _train(tf.distribute.get_strategy(),
                        tf.data.Dataset.from_tensor_slices(_batches()).batch(_GLOBAL_BATCH))
      finally:
        tf.config.run_functions_eagerly(False)
      outputs = []
      for worker in workers:
        output, _ = worker.communicate(timeout=300)
        self.assertEqual(worker.returncode, 0, output[-3000:])
        outputs.append(output)
    finally:
      for worker in workers:
        if worker.poll() is None:
          worker.kill()
          worker.wait()
    losses = [
        json.loads(next(line
                        for line in out.splitlines()
                        if line.startswith("LOSSES "))[7:])
        for out in outputs
    ]
    self.assertLen(losses[0], _STEPS)
    self.assertAllClose(losses[0], losses[1])
    self.assertAllClose(losses[0], single, rtol=1e-4)
    # The second step saw updated weights: training happened, identically everywhere.
    self.assertNotAllClose(single[0], single[1])


if __name__ == "__main__":
  if "--as_worker" in sys.argv:
    _run_worker()
  else:
    tf.test.main()
