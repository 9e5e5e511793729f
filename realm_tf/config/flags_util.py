"""Helpers that turn common flag values into library objects (binaries stay thin; nothing reads FLAGS)."""

import os

from absl import logging
import tensorflow as tf
import tf_keras

from realm_tf import tokenization
from realm_tf.modeling import bert
from realm_tf.training import distribute


def bert_config(spec: str, vocab_path: str) -> bert.BertConfig:
  """--bert_config: a preset name ("tiny", "bert_base"; vocab size from the vocab file) or a path to a
  Google bert_config.json / Hugging Face config.json (or a directory holding one).

  Raises ValueError naming the flag, the presets and what a config file needs.
  """
  if spec in bert.PRESETS:
    return bert.PRESETS[spec](len(tokenization.load_vocab(vocab_path)))
  presets = ", ".join(bert.PRESETS)
  if tf.io.gfile.isdir(spec):
    found = [
        os.path.join(spec, name)
        for name in ("bert_config.json", "config.json")
        if tf.io.gfile.exists(os.path.join(spec, name))
    ]
    if not found:
      raise ValueError(f"--bert_config={spec} is a directory without a bert_config.json or config.json; "
                       f"pass a preset ({presets}) or the config file's path")
    spec = found[0]
  elif not tf.io.gfile.exists(spec):
    raise ValueError(f"unknown --bert_config {spec!r}: presets are {presets}, or a path to a "
                     "bert_config.json / config.json (no such file)")
  try:
    return bert.BertConfig.from_json_file(spec)
  except ValueError as e:
    raise ValueError(f"--bert_config={e}") from None


def set_precision(mixed_precision: str) -> None:
  """--mixed_precision: "float32" or "mixed_bfloat16" (what TPUs use); set before building models."""
  if mixed_precision not in ("float32", "mixed_bfloat16"):
    raise ValueError(f"--mixed_precision must be float32 or mixed_bfloat16, got {mixed_precision!r}")
  tf_keras.mixed_precision.set_global_policy(mixed_precision)


def strategy_from_flags(name: str, tpu: str, num_cpu_devices: int):
  if num_cpu_devices > 1:
    distribute.configure_logical_cpus(num_cpu_devices)
  return distribute.get_strategy(name, tpu=tpu, num_cpu_devices=num_cpu_devices)


def setup_device(strategy: str, tpu: str, num_cpu_devices: int, mixed_precision: str):
  """--strategy, --tpu, --num_cpu_devices, --mixed_precision: the strategy (logical CPUs first), with the
  precision policy set; call before building models."""
  distribution = strategy_from_flags(strategy, tpu, num_cpu_devices)
  set_precision(mixed_precision)
  logging.info("strategy %s with %d replicas", strategy, distribution.num_replicas_in_sync)
  return distribution
