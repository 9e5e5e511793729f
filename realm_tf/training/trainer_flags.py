"""The absl flags every trainer binary shares (bin/train_realm, bin/train_ict, bin/train_orqa).

Defined once here (as Model Garden's official/common/flags.py does) so the binaries agree on names,
meanings and help; each binary passes its own defaults. Only binaries call define_trainer_flags and read
the values; the library below them takes plain arguments.
"""

import dataclasses

from absl import flags
from absl import logging

from realm_tf.modeling import embedder
from realm_tf.training import distribute
from realm_tf.training import flags_util
from realm_tf.training import loop

# The flags define_trainer_flags defines belong to the binary that calls it, as if that binary had defined
# them itself: absl's --help lists only the main module's key flags, so each trainer's --help shows the
# shared flags beside its own (--helpfull still adds absl's and TensorFlow's). absl's documented way for
# a module whose functions define flags on behalf of their caller.
flags.disclaim_key_flags()


@dataclasses.dataclass(frozen=True)
class TrainerFlags:
  """Holders of the shared flags (read .value after absl parsed the command line)."""
  model_dir: flags.FlagHolder
  vocab_path: flags.FlagHolder
  do_lower_case: flags.FlagHolder
  bert_config: flags.FlagHolder
  batch_size: flags.FlagHolder
  learning_rate: flags.FlagHolder
  adam_bias_correction: flags.FlagHolder
  num_train_steps: flags.FlagHolder
  save_checkpoints_steps: flags.FlagHolder
  keep_checkpoint_max: flags.FlagHolder
  log_every_steps: flags.FlagHolder
  steps_per_loop: flags.FlagHolder
  seed: flags.FlagHolder
  strategy: flags.FlagHolder
  tpu: flags.FlagHolder
  num_cpu_devices: flags.FlagHolder
  jit_compile: flags.FlagHolder
  mixed_precision: flags.FlagHolder
  embedder_pooling: flags.FlagHolder

  def loop_options(self) -> loop.LoopOptions:
    return loop.LoopOptions(
        model_dir=self.model_dir.value, num_train_steps=self.num_train_steps.value,
        save_checkpoints_steps=self.save_checkpoints_steps.value,
        keep_checkpoint_max=self.keep_checkpoint_max.value,
        log_every_steps=self.log_every_steps.value, jit_compile=self.jit_compile.value,
        global_batch_size=self.batch_size.value, steps_per_loop=self.steps_per_loop.value)

  def setup(self):
    """Strategy (logical CPUs first), precision policy, BERT config; returns (strategy, bert_config)."""
    strategy = flags_util.strategy_from_flags(self.strategy.value, self.tpu.value,
                                              self.num_cpu_devices.value)
    flags_util.set_precision(self.mixed_precision.value)
    logging.info("strategy %s with %d replicas", self.strategy.value, strategy.num_replicas_in_sync)
    return strategy, flags_util.bert_config(self.bert_config.value, self.vocab_path.value)


def define_trainer_flags(batch_size: int, learning_rate: float, num_train_steps: int,
                         save_checkpoints_steps: int) -> TrainerFlags:
  """Defines the shared flags with this binary's defaults, as key flags of the calling module."""
  return TrainerFlags(
      model_dir=flags.DEFINE_string("model_dir", None, "Checkpoints, summaries, run config.",
                                    required=True),
      vocab_path=flags.DEFINE_string("vocab_path", None, "BERT vocab file.", required=True),
      do_lower_case=flags.DEFINE_bool("do_lower_case", True, "Uncased vocab."),
      bert_config=flags.DEFINE_string("bert_config", "tiny",
                                      "Preset (tiny, bert_base) or a bert_config.json / config.json."),
      batch_size=flags.DEFINE_integer("batch_size", batch_size, "Global batch size."),
      learning_rate=flags.DEFINE_float("learning_rate", learning_rate, "Peak learning rate."),
      adam_bias_correction=flags.DEFINE_bool(
          "adam_bias_correction", False, "Adam bias correction (the original BERT optimizer had none)."),
      num_train_steps=flags.DEFINE_integer("num_train_steps", num_train_steps, "Steps to train."),
      save_checkpoints_steps=flags.DEFINE_integer("save_checkpoints_steps", save_checkpoints_steps,
                                                  "Checkpoint interval."),
      keep_checkpoint_max=flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept."),
      log_every_steps=flags.DEFINE_integer("log_every_steps", 10, "Progress line interval."),
      steps_per_loop=flags.DEFINE_integer(
          "steps_per_loop", 1, "Steps run in one compiled loop between two looks of the host (on TPUs, "
          "e.g. 100); --save_checkpoints_steps and --log_every_steps must be multiples of it."),
      seed=flags.DEFINE_integer("seed", 0, "Seed of the example stream."),
      strategy=flags.DEFINE_enum("strategy", "cpu", distribute.STRATEGIES, "Distribution strategy."),
      tpu=flags.DEFINE_string("tpu", "", "TPU name, grpc:// address, or local, for --strategy=tpu."),
      num_cpu_devices=flags.DEFINE_integer("num_cpu_devices", 1,
                                           "Logical CPUs for --strategy=mirrored on CPU."),
      jit_compile=flags.DEFINE_bool("jit_compile", True, "Compile the train step with XLA."),
      mixed_precision=flags.DEFINE_enum("mixed_precision", "float32", ["float32", "mixed_bfloat16"],
                                        "Keras precision policy."),
      embedder_pooling=flags.DEFINE_enum(
          "embedder_pooling", embedder.POOLER, list(embedder.POOLINGS),
          "Retriever embedding: BERT's [CLS] pooler (the original) or the mean of the last hidden "
          "states (sentence-transformers; learns lexical matches sooner). Use the warm start's."))
