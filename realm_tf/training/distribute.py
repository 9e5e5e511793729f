"""tf.distribute strategies for the realm_tf trainers, chosen by name from a --strategy flag.

Users train on Cloud TPU (TPUStrategy) or GPUs (MirroredStrategy); development and tests run on CPU. To
exercise the same multi-replica code path on a CPU-only machine, the physical CPU can be split into N
logical devices (`configure_logical_cpus`) and mirrored over them: the custom training loops then see
real per-replica values, cross-replica reductions and mirrored variables, exactly as on accelerators.

Two TensorFlow facts shape this module:
  * Logical devices can only be configured before TensorFlow initializes its runtime (the first op,
    tensor or device query). Binaries therefore act on --num_cpu_devices first thing in main().
  * Without a TPU, TPUClusterResolver / initialize_tpu_system fail with errors that do not say "there is no
    TPU" (a ValueError about a TPU name, a NotFoundError about the cluster, a urllib URLError from the GCE
    metadata server). `get_strategy("tpu")` turns them into one `NoTpuFoundError` that says what to do.

Library code: values come in as arguments; no absl flags are read here.
"""

import os
import urllib.error
from typing import Dict, List, Optional, Tuple

from absl import logging
import tensorflow as tf

STRATEGIES = ("tpu", "mirrored", "multi_worker_mirrored", "one_device", "cpu")


class NoTpuFoundError(RuntimeError):
  """No TPU could be reached with the given --tpu value (raised by get_strategy("tpu"))."""


def _physical_cpu() -> tf.config.PhysicalDevice:
  # Listing physical devices does not initialize the runtime, so this is safe before configuration.
  return tf.config.list_physical_devices("CPU")[0]


def configure_logical_cpus(num_cpu_devices: int) -> None:
  """Splits the physical CPU into `num_cpu_devices` logical devices (/cpu:0 ... /cpu:N-1).

  Must run before TensorFlow initializes its runtime. Calling it again with the same number is a no-op,
  and so is asking for 1 device when nothing was configured (1 is TensorFlow's default).

  Raises:
    ValueError: num_cpu_devices < 1.
    RuntimeError: TensorFlow is already initialized with a different CPU layout.
  """
  if num_cpu_devices < 1:
    raise ValueError(f"num_cpu_devices must be >= 1, got {num_cpu_devices}")
  cpu = _physical_cpu()
  current = tf.config.get_logical_device_configuration(cpu)
  if (current is None and num_cpu_devices == 1) or (current is not None and len(current) == num_cpu_devices):
    return
  try:
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_cpu_devices)])
  except RuntimeError as e:
    have = len(current) if current is not None else 1
    raise RuntimeError(
        f"Cannot split the CPU into {num_cpu_devices} logical devices: TensorFlow is already "
        f"initialized (with {have} CPU device(s)). Call configure_logical_cpus() first, before any "
        "TensorFlow op, tensor or device query runs; in a binary, pass --num_cpu_devices and let it act "
        f"before anything else runs. ({e})") from None
  logging.info("Split the CPU into %d logical devices.", num_cpu_devices)


def _ensure_logical_cpus(num_cpu_devices: int) -> None:
  """Makes at least `num_cpu_devices` logical CPUs exist, configuring them if nothing was configured."""
  current = tf.config.get_logical_device_configuration(_physical_cpu())
  if current is None:
    configure_logical_cpus(num_cpu_devices)
  elif len(current) < num_cpu_devices:
    raise RuntimeError(
        f"num_cpu_devices={num_cpu_devices} but the CPU was already split into {len(current)} logical "
        "devices; call configure_logical_cpus() once, first, with the number you need.")


def _gpu_names() -> List[str]:
  return [f"/gpu:{i}" for i in range(len(tf.config.list_physical_devices("GPU")))]


def _tpu_strategy(tpu: str) -> tf.distribute.TPUStrategy:
  where = f"--tpu={tpu}" if tpu else "--tpu='' (and no TPU_NAME in the environment)"
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or None)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
  except (ValueError, tf.errors.NotFoundError, urllib.error.URLError) as e:
    cause = str(e).strip().splitlines()[0] if str(e).strip() else ""
    raise NoTpuFoundError(
        f"No TPU was found at {where} ({type(e).__name__}: {cause[:200]}). Pass the TPU's name or "
        "address, e.g. --tpu=my-tpu or --tpu=grpc://10.0.0.2:8470; on a TPU VM, --tpu=local works. "
        "To run without a TPU, use --strategy=cpu or --strategy=mirrored.") from None
  strategy = tf.distribute.TPUStrategy(resolver)
  logging.info("TPUStrategy on %s: %d replicas.", tpu or "TPU_NAME", strategy.num_replicas_in_sync)
  return strategy


# One strategy per (name, tpu, num_cpu_devices) per process, see get_strategy.
_STRATEGY_CACHE: Dict[Tuple[str, str, int], tf.distribute.Strategy] = {}


def get_strategy(name: str, tpu: str = "", num_cpu_devices: int = 1) -> tf.distribute.Strategy:
  """Returns the distribution strategy called `name` (one of STRATEGIES), created once per process.

  Asking again with the same arguments returns the same object. That matters: initializing a TPU system
  twice wipes its memory, and every MirroredStrategy numbers its collective ops from the same start, so
  two of them over the same devices in one process abort each other's all-reduces ("Shape mismatch in
  the collective instance 100").

  Args:
    name: "tpu": TPUStrategy on the TPU named by `tpu` (NoTpuFoundError when there is none).
      "mirrored": MirroredStrategy over all GPUs; without GPUs, over /cpu:0 ... /cpu:{num_cpu_devices-1}
      (the logical CPUs are configured here if nothing configured them yet).
      "multi_worker_mirrored": MultiWorkerMirroredStrategy; the cluster comes from TF_CONFIG (without it,
      a single worker on this machine).
      "one_device": OneDeviceStrategy on the first GPU, else on the CPU.
      "cpu": OneDeviceStrategy on /cpu:0, even when accelerators are visible.
    tpu: TPU name or grpc:// address, or "local" on a TPU VM (only for "tpu").
    num_cpu_devices: replicas for "mirrored" on a machine without GPUs.

  Raises:
    ValueError: unknown name, or num_cpu_devices < 1.
    NoTpuFoundError: name is "tpu" and no TPU is reachable.
    RuntimeError: logical CPUs are needed but TensorFlow is already initialized without them.
  """
  if num_cpu_devices < 1:
    raise ValueError(f"num_cpu_devices must be >= 1, got {num_cpu_devices}")
  if name not in STRATEGIES:
    raise ValueError(f"Unknown strategy {name!r}; choose one of: {', '.join(STRATEGIES)}.")
  cpu_replicas = num_cpu_devices if name == "mirrored" and not _gpu_names() else 1
  key = (name, tpu if name == "tpu" else "", cpu_replicas)
  if key not in _STRATEGY_CACHE:
    _STRATEGY_CACHE[key] = _create_strategy(name, tpu, num_cpu_devices)
  return _STRATEGY_CACHE[key]


def _create_strategy(name: str, tpu: str, num_cpu_devices: int) -> tf.distribute.Strategy:
  """Builds a new strategy; see get_strategy."""
  if name == "tpu":
    return _tpu_strategy(tpu)
  if name == "cpu":
    return tf.distribute.OneDeviceStrategy("/cpu:0")
  if name == "one_device":
    gpus = _gpu_names()
    return tf.distribute.OneDeviceStrategy(gpus[0] if gpus else "/cpu:0")
  if name == "mirrored":
    gpus = _gpu_names()
    if gpus:
      if num_cpu_devices > 1:
        logging.warning("num_cpu_devices=%d is ignored: mirroring over %d GPU(s).", num_cpu_devices,
                        len(gpus))
      strategy = tf.distribute.MirroredStrategy(gpus)
    else:
      if num_cpu_devices > 1:
        _ensure_logical_cpus(num_cpu_devices)
      strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(num_cpu_devices)])
    logging.info("MirroredStrategy: %d replicas.", strategy.num_replicas_in_sync)
    return strategy
  if name == "multi_worker_mirrored":
    if not os.environ.get("TF_CONFIG"):
      logging.info("TF_CONFIG is not set: multi_worker_mirrored runs as a single worker on this machine.")
    return tf.distribute.MultiWorkerMirroredStrategy()
  raise AssertionError(name)  # get_strategy checked the name.


def replica_count(strategy: Optional[tf.distribute.Strategy] = None) -> int:
  """Replicas that run each step in sync (the current strategy when none is given)."""
  return (strategy or tf.distribute.get_strategy()).num_replicas_in_sync


def global_batch_size(strategy: tf.distribute.Strategy, per_replica_batch_size: int) -> int:
  """The batch one synchronous step consumes: per-replica batch times the replica count."""
  return per_replica_batch_size * replica_count(strategy)


def per_replica_batch_size(strategy: tf.distribute.Strategy, global_batch: int) -> int:
  """Splits a global batch over the replicas; it must divide evenly (TPUs need equal static shapes)."""
  replicas = replica_count(strategy)
  if global_batch % replicas:
    raise ValueError(f"Global batch size {global_batch} does not divide evenly over {replicas} replicas.")
  return global_batch // replicas
