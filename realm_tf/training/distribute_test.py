"""Tests for realm_tf.training.distribute: strategy selection, logical CPUs and the no-TPU message.

The two-replica tests need the CPU split before TensorFlow initializes, so this module does it at import.
Bazel runs this file alone, where that always works; under a pytest run of many files another module may
have initialized TensorFlow first, and then those tests skip with the reason.
"""

import os
from unittest import mock

import tensorflow as tf

from realm_tf.training import distribute

try:
  distribute.configure_logical_cpus(2)
  _SPLIT_ERROR = None
except RuntimeError as e:  # TensorFlow was initialized by an earlier test module (pytest only).
  _SPLIT_ERROR = str(e)

# Environment variables TPUClusterResolver falls back to when --tpu is empty.
_TPU_ENV_VARS = ("TPU_NAME", "TPU_CONFIG", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS")


class DistributeTest(tf.test.TestCase):

  def _require_two_cpus(self):
    if _SPLIT_ERROR:
      self.skipTest(_SPLIT_ERROR)

  def test_cpu_is_one_replica_on_cpu0(self):
    strategy = distribute.get_strategy("cpu")
    self.assertIsInstance(strategy, tf.distribute.OneDeviceStrategy)
    self.assertEqual(distribute.replica_count(strategy), 1)
    self.assertEqual(strategy.extended.worker_devices, ("/job:localhost/replica:0/task:0/device:CPU:0",))
    result = strategy.run(tf.function(lambda: tf.constant(3.0) * 2.0))
    self.assertEqual(float(result), 6.0)

  def test_one_device_without_gpu_uses_cpu(self):
    if tf.config.list_physical_devices("GPU"):
      self.skipTest("this machine has a GPU")
    strategy = distribute.get_strategy("one_device")
    self.assertIsInstance(strategy, tf.distribute.OneDeviceStrategy)
    self.assertEqual(strategy.extended.worker_devices, ("/job:localhost/replica:0/task:0/device:CPU:0",))

  def test_mirrored_over_two_logical_cpus_runs_per_replica(self):
    self._require_two_cpus()
    strategy = distribute.get_strategy("mirrored", num_cpu_devices=2)
    self.assertIsInstance(strategy, tf.distribute.MirroredStrategy)
    self.assertEqual(distribute.replica_count(strategy), 2)
    self.assertEqual([d.split("/")[-1] for d in strategy.extended.worker_devices],
                     ["device:CPU:0", "device:CPU:1"])
    with strategy.scope():
      scale = tf.Variable(10.0)
    # A global batch of 4 examples: replica 0 gets [0, 1], replica 1 gets [2, 3].
    dataset = tf.data.Dataset.range(4).map(lambda x: tf.cast(x, tf.float32)).batch(
        distribute.global_batch_size(strategy, 2))
    batch = next(iter(strategy.experimental_distribute_dataset(dataset)))

    @tf.function
    def step(x):

      def replica_fn(x):
        ctx = tf.distribute.get_replica_context()
        return tf.reduce_sum(x) * scale, ctx.replica_id_in_sync_group, ctx.all_reduce("sum", tf.size(x))

      return strategy.run(replica_fn, args=(x,))

    sums, replica_ids, sizes = step(batch)
    self.assertEqual([float(v) for v in strategy.experimental_local_results(sums)], [10.0, 50.0])
    self.assertEqual([int(v) for v in strategy.experimental_local_results(replica_ids)], [0, 1])
    self.assertEqual([int(v) for v in strategy.experimental_local_results(sizes)], [4, 4])
    self.assertEqual(float(strategy.reduce("sum", sums, axis=None)), 60.0)

  def test_mirrored_with_one_cpu_device(self):
    strategy = distribute.get_strategy("mirrored", num_cpu_devices=1)
    self.assertIsInstance(strategy, tf.distribute.MirroredStrategy)
    self.assertEqual(distribute.replica_count(strategy), 1)

  def test_mirrored_asking_for_more_cpus_than_configured(self):
    self._require_two_cpus()
    with self.assertRaisesRegex(RuntimeError, "already split into 2 logical devices.*configure_logical_cpus"):
      distribute.get_strategy("mirrored", num_cpu_devices=3)

  def test_configure_logical_cpus_again_is_a_no_op_and_late_change_is_explained(self):
    self._require_two_cpus()
    tf.constant(0.0)  # TensorFlow is initialized from here on.
    distribute.configure_logical_cpus(2)
    with self.assertRaisesRegex(RuntimeError, r"(?s)already initialized.*first.*--num_cpu_devices"):
      distribute.configure_logical_cpus(4)
    self.assertLen(tf.config.list_logical_devices("CPU"), 2)

  def test_configure_logical_cpus_rejects_zero(self):
    with self.assertRaisesRegex(ValueError, "num_cpu_devices must be >= 1"):
      distribute.configure_logical_cpus(0)

  def test_multi_worker_mirrored_without_tf_config_is_single_worker(self):
    with mock.patch.dict(os.environ):
      os.environ.pop("TF_CONFIG", None)
      strategy = distribute.get_strategy("multi_worker_mirrored")
    self.assertIsInstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    self.assertEqual(strategy.cluster_resolver.task_type, None)
    self.assertGreaterEqual(distribute.replica_count(strategy), 1)

  def test_tpu_without_a_name_says_how_to_pass_one(self):
    with mock.patch.dict(os.environ):
      for name in _TPU_ENV_VARS:
        os.environ.pop(name, None)
      with self.assertRaises(distribute.NoTpuFoundError) as raised:
        distribute.get_strategy("tpu", tpu="")
    message = str(raised.exception)
    for expected in ("No TPU was found at --tpu=''", "--tpu=my-tpu", "grpc://", "--tpu=local",
                     "--strategy=cpu", "--strategy=mirrored"):
      self.assertIn(expected, message)
    self.assertIsNone(raised.exception.__cause__)

  def test_tpu_local_without_a_tpu(self):
    if tf.config.list_logical_devices("TPU"):
      self.skipTest("this machine has a TPU")
    with self.assertRaisesRegex(distribute.NoTpuFoundError,
                                r"No TPU was found at --tpu=local \(NotFoundError: TPUs not found"):
      distribute.get_strategy("tpu", tpu="local")

  def test_unknown_strategy_lists_the_choices(self):
    with self.assertRaisesRegex(
        ValueError, r"Unknown strategy 'gpu'; choose one of: tpu, mirrored, multi_worker_mirrored, "
        r"one_device, cpu\."):
      distribute.get_strategy("gpu")

  def test_one_strategy_per_arguments_per_process(self):
    self.assertIs(distribute.get_strategy("cpu"), distribute.get_strategy("cpu"))
    self.assertIs(distribute.get_strategy("mirrored", num_cpu_devices=1),
                  distribute.get_strategy("mirrored", num_cpu_devices=1))
    self.assertIsNot(distribute.get_strategy("cpu"), distribute.get_strategy("one_device"))

  def test_batch_sizes(self):
    self._require_two_cpus()
    strategy = distribute.get_strategy("mirrored", num_cpu_devices=2)
    self.assertEqual(distribute.global_batch_size(strategy, 3), 6)
    self.assertEqual(distribute.per_replica_batch_size(strategy, 8), 4)
    with self.assertRaisesRegex(ValueError, "7 does not divide evenly over 2 replicas"):
      distribute.per_replica_batch_size(strategy, 7)
    self.assertEqual(distribute.global_batch_size(distribute.get_strategy("cpu"), 3), 3)


if __name__ == "__main__":
  tf.test.main()
