"""The absl flags the binaries share, each declared once here, in groups a binary defines together.

  define_model_dir_flag    --model_dir
  define_vocab_flags       --vocab_path --do_lower_case
  define_model_flags       --model_dir --vocab_path --do_lower_case --bert_config --embedder_pooling
                           --cosine_score_scale --seed
  define_device_flags      --strategy --tpu --num_cpu_devices --mixed_precision
  define_jit_compile_flag  --jit_compile
  define_loop_flags        --batch_size --learning_rate --adam_bias_correction --num_train_steps
                           --save_checkpoints_steps --keep_checkpoint_max --log_every_steps --steps_per_loop
                           --gradient_accumulation_steps
  define_retrieval_corpus_flag   --retrieval_corpus_path
  define_pretraining_corpus_flag --pretraining_corpus_path
  define_retriever_flags   --retrieval_corpus_path --projection_size --embedder_layer_norm_epsilon
                           --query_seq_len --candidate_seq_len (a retriever over a retrieval corpus)
  define_index_implementation_flag  --index_implementation
  define_indexes_kept_flag  --keep (published REALM indexes)
  define_retriever_checkpoint_flag  --retriever_checkpoint
  define_embed_batch_size_flag      --embed_batch_size
  define_qa_data_flags     --train_path --dev_path --max_eval_examples (a trainer's QA files)
  define_skip_invalid_flag --skip_invalid
  define_recall_flags      --recall_ks (retriever recall@k of an evaluation)
  define_document_corpus_flags  --input_path --output_prefix --num_output_shards --skip_invalid
                           (a bin/generate_*_corpus job: raw documents in, TFRecord shards out)
  define_trainer_flags     model + device + jit + loop: what every bin/train_* loop trainer takes

As Model Garden's official/common/flags.py does, so the binaries agree on names, meanings and help; each
binary passes its own defaults. Only binaries call these and read the values; the library below them takes
plain arguments (flags_util turns values into library objects).
"""

import dataclasses
from typing import Sequence

from absl import app
from absl import flags
from absl import logging

from realm_tf.modeling import bert as bert_lib
from realm_tf.modeling import embedder
from realm_tf.training import distribute
from realm_tf.training import flags_util
from realm_tf.training import loop

# The flags these functions define belong to the binary that calls them, as if that binary had defined
# them itself: absl's --help lists only the main module's key flags, so each binary's --help shows the
# shared flags beside its own (--helpfull still adds absl's and TensorFlow's). absl's documented way for
# a module whose functions define flags on behalf of their caller.
flags.disclaim_key_flags()

_POOLING_HELP = ("Retriever embedding: BERT's [CLS] pooler (the original) or the mean of the last hidden "
                 "states (sentence-transformers; learns lexical matches sooner). Use the warm start's.")


@dataclasses.dataclass(frozen=True)
class ModelFlags:
  """Holders of define_model_flags' flags (read .value after absl parsed the command line)."""
  model_dir: flags.FlagHolder
  vocab_path: flags.FlagHolder
  do_lower_case: flags.FlagHolder
  bert_config: flags.FlagHolder
  embedder_pooling: flags.FlagHolder
  cosine_score_scale: flags.FlagHolder
  seed: flags.FlagHolder

  def bert(self) -> bert_lib.BertConfig:
    return flags_util.bert_config(self.bert_config.value, self.vocab_path.value)


def define_model_dir_flag(help_text: str) -> flags.FlagHolder:
  return flags.DEFINE_string("model_dir", None, help_text, required=True)


@dataclasses.dataclass(frozen=True)
class VocabFlags:
  """Holders of define_vocab_flags' flags."""
  vocab_path: flags.FlagHolder
  do_lower_case: flags.FlagHolder


def define_vocab_flags() -> VocabFlags:
  """The BERT wordpiece vocab and its casing (a model's, or bin/generate_retrieval_corpus's tokenizer)."""
  return VocabFlags(
      vocab_path=flags.DEFINE_string("vocab_path", None, "BERT vocab file.", required=True),
      do_lower_case=flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased BERT)."))


def define_model_flags(model_dir_help: str = "Checkpoints, summaries, run config.",
                       embedder_pooling: str = embedder.POOLER,
                       pooling_help: str = _POOLING_HELP) -> ModelFlags:
  """The run's model dir and its BERT / retriever model description."""
  model_dir = define_model_dir_flag(model_dir_help)
  vocab = define_vocab_flags()
  return ModelFlags(
      model_dir=model_dir, vocab_path=vocab.vocab_path, do_lower_case=vocab.do_lower_case,
      bert_config=flags.DEFINE_string("bert_config", "tiny",
                                      "Preset (tiny, bert_base) or a bert_config.json / config.json."),
      embedder_pooling=flags.DEFINE_enum("embedder_pooling", embedder_pooling, list(embedder.POOLINGS),
                                         pooling_help),
      cosine_score_scale=flags.DEFINE_float(
          "cosine_score_scale", 0.0,
          "0: retrieval scores are raw inner products (REALM, ORQA). s > 0: the retriever's embeddings are "
          "L2-normalised and scores are s x cosine, for a retriever warm-started from a sentence-"
          "transformers model (all-MiniLM-L6-v2: --embedder_pooling=mean --projection_size=0 "
          "--cosine_score_scale=20, its own training's scale).", lower_bound=0.0),
      seed=flags.DEFINE_integer("seed", 0, "Seed of initializations and of the example stream."))


@dataclasses.dataclass(frozen=True)
class DeviceFlags:
  """Holders of define_device_flags' flags."""
  strategy: flags.FlagHolder
  tpu: flags.FlagHolder
  num_cpu_devices: flags.FlagHolder
  mixed_precision: flags.FlagHolder

  def setup(self):
    """The strategy (logical CPUs first), with the precision policy set; call before building models."""
    strategy = flags_util.strategy_from_flags(self.strategy.value, self.tpu.value,
                                              self.num_cpu_devices.value)
    flags_util.set_precision(self.mixed_precision.value)
    logging.info("strategy %s with %d replicas", self.strategy.value, strategy.num_replicas_in_sync)
    return strategy


def define_device_flags(mixed_precision_help: str = "Keras precision policy.") -> DeviceFlags:
  """Where and in which precision the binary's models run."""
  return DeviceFlags(
      strategy=flags.DEFINE_enum("strategy", "cpu", distribute.STRATEGIES, "Distribution strategy."),
      tpu=flags.DEFINE_string("tpu", "", "TPU name, grpc:// address, or local, for --strategy=tpu."),
      num_cpu_devices=flags.DEFINE_integer("num_cpu_devices", 1,
                                           "Logical CPUs for --strategy=mirrored on CPU."),
      mixed_precision=flags.DEFINE_enum("mixed_precision", "float32", ["float32", "mixed_bfloat16"],
                                        mixed_precision_help))


def define_jit_compile_flag(default: bool = True) -> flags.FlagHolder:
  return flags.DEFINE_bool("jit_compile", default,
                           "Compile the train steps with XLA, and a trainer's own corpus embedding "
                           "(bin/train_realm's bootstrap index, bin/train_orqa's frozen index, "
                           "bin/train_fid_kd's refreshed indexes).")


@dataclasses.dataclass(frozen=True)
class LoopFlags:
  """Holders of define_loop_flags' flags."""
  batch_size: flags.FlagHolder
  learning_rate: flags.FlagHolder
  adam_bias_correction: flags.FlagHolder
  num_train_steps: flags.FlagHolder
  save_checkpoints_steps: flags.FlagHolder
  keep_checkpoint_max: flags.FlagHolder
  log_every_steps: flags.FlagHolder
  steps_per_loop: flags.FlagHolder
  gradient_accumulation_steps: flags.FlagHolder


def define_loop_flags(batch_size: int, learning_rate: float, num_train_steps: int,
                      save_checkpoints_steps: int) -> LoopFlags:
  """The training loop's batch, optimizer, length, checkpoints and logging."""
  return LoopFlags(
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
      gradient_accumulation_steps=flags.DEFINE_integer(
          "gradient_accumulation_steps", 1, "Parts each replica's batch is cut into and run one after "
          "another, their gradients summed into one update: the update of the whole --batch_size with "
          "the memory of a part. Must divide the per-replica batch.", lower_bound=1))


def define_retrieval_corpus_flag() -> flags.FlagHolder:
  return flags.DEFINE_string("retrieval_corpus_path", None,
                             "Prefix of the retrieval corpus (bin/generate_retrieval_corpus output).",
                             required=True)


@dataclasses.dataclass(frozen=True)
class RetrieverFlags:
  """Holders of define_retriever_flags' flags."""
  retrieval_corpus_path: flags.FlagHolder
  projection_size: flags.FlagHolder
  embedder_layer_norm_epsilon: flags.FlagHolder
  query_seq_len: flags.FlagHolder
  candidate_seq_len: flags.FlagHolder


def define_retriever_flags(query_seq_len: int, candidate_seq_len: int,
                           projection_size: int = 128) -> RetrieverFlags:
  """A retriever over a retrieval corpus (bin/train_realm, bin/train_orqa, bin/train_fid_kd)."""
  return RetrieverFlags(
      retrieval_corpus_path=define_retrieval_corpus_flag(),
      projection_size=flags.DEFINE_integer(
          "projection_size", projection_size,
          "Retriever dimension D; 0: no projection, D is the BERT's hidden size (keeps a sentence-"
          "transformers model's own space, e.g. all-MiniLM-L6-v2 with --embedder_pooling=mean)."),
      embedder_layer_norm_epsilon=flags.DEFINE_float(
          "embedder_layer_norm_epsilon", 1e-12,
          "Embedder LayerNorm epsilon (1e-3 for a retriever warm-started by ICT)."),
      query_seq_len=flags.DEFINE_integer("query_seq_len", query_seq_len, "Retriever query length Q."),
      candidate_seq_len=flags.DEFINE_integer("candidate_seq_len", candidate_seq_len,
                                             "Retriever document length C."))


def define_pretraining_corpus_flag() -> flags.FlagHolder:
  return flags.DEFINE_string("pretraining_corpus_path", None,
                             "Prefix of bin/generate_pretraining_corpus output.", required=True)


def define_index_implementation_flag(help_text: str) -> flags.FlagHolder:
  return flags.DEFINE_enum("index_implementation", "scann", ["scann", "brute_force"], help_text)


def define_indexes_kept_flag(help_text: str = "Published indexes to keep.") -> flags.FlagHolder:
  # Help per binary: bin/update_index keeps them only when it updates a REALM index.
  return flags.DEFINE_integer("keep", 3, help_text)


def define_retriever_checkpoint_flag(help_text: str) -> flags.FlagHolder:
  # Help per binary: bin/train_orqa needs a trained retriever, bin/train_fid_kd starts untrained without.
  return flags.DEFINE_string("retriever_checkpoint", None, help_text)


def define_embed_batch_size_flag() -> flags.FlagHolder:
  return flags.DEFINE_integer("embed_batch_size", 128, "Batch size of the corpus embedding.")


@dataclasses.dataclass(frozen=True)
class QaDataFlags:
  """Holders of define_qa_data_flags' flags."""
  train_path: flags.FlagHolder
  dev_path: flags.FlagHolder
  max_eval_examples: flags.FlagHolder


def define_qa_data_flags(dev_help: str, dev_required: bool) -> QaDataFlags:
  """A QA trainer's training and dev questions (bin/train_orqa, bin/train_fid_kd).

  The dev file's help and whether it is required are the binary's: bin/train_orqa trains without one
  (no periodic evaluation, no best checkpoint), bin/train_fid_kd needs it to accept or reject each round.
  """
  return QaDataFlags(
      train_path=flags.DEFINE_string("train_path", None, "Training QA file (any realm_tf.data.qa.load_qa "
                                     "input: .jsonl, .json, .tsv or tfds:NAME/SPLIT).", required=True),
      dev_path=flags.DEFINE_string("dev_path", None, dev_help, required=dev_required),
      max_eval_examples=flags.DEFINE_integer("max_eval_examples", None,
                                             "Evaluate on the first N dev questions only."))


def define_skip_invalid_flag(
    help_text: str = "Skip malformed QA records instead of failing.") -> flags.FlagHolder:
  # Help per binary: what a malformed record is (a QA record, a corpus document) and whether it is counted.
  return flags.DEFINE_bool("skip_invalid", False, help_text)


@dataclasses.dataclass(frozen=True)
class RecallFlags:
  """Holder of define_recall_flags' flag."""
  recall_ks: flags.FlagHolder

  def ks(self) -> tuple[int, ...]:
    """The cut-offs as integers; a usage error names the flag otherwise."""
    try:
      return tuple(int(k) for k in self.recall_ks.value)
    except ValueError:
      raise app.UsageError(f"--recall_ks must be integers, got {self.recall_ks.value}") from None


def define_recall_flags(recall_ks: Sequence[int]) -> RecallFlags:
  """The cut-offs of retriever recall@k (bin/eval_orqa, bin/train_fid_kd).

  The default is the binary's library's (orqa_evaluation.DEFAULT_RECALL_KS, up to the 100 blocks ORQA
  reports; fid_kd.FidKdOptions.recall_ks, up to 20 for the dev recall of every round).
  """
  return RecallFlags(recall_ks=flags.DEFINE_list("recall_ks", [str(k) for k in recall_ks],
                                                 "Cut-offs of retriever recall@k."))


@dataclasses.dataclass(frozen=True)
class DocumentCorpusFlags:
  """Holders of define_document_corpus_flags' flags."""
  input_path: flags.FlagHolder
  output_prefix: flags.FlagHolder
  num_output_shards: flags.FlagHolder
  skip_invalid: flags.FlagHolder


def define_document_corpus_flags() -> DocumentCorpusFlags:
  """A corpus job's documents and output shards (bin/generate_retrieval_corpus,
  bin/generate_pretraining_corpus; both read realm_tf.data.text_records and write with shards.ShardedWriter,
  which writes at most one shard per document)."""
  return DocumentCorpusFlags(
      input_path=flags.DEFINE_string("input_path", None, "JSONL or TSV file of documents.", required=True),
      output_prefix=flags.DEFINE_string("output_prefix", None, "Path prefix of the output shards.",
                                        required=True),
      num_output_shards=flags.DEFINE_integer("num_output_shards", 50,
                                             "Number of shards (at most one per document).", lower_bound=1),
      skip_invalid=define_skip_invalid_flag(
          "Skip malformed records (and report how many) instead of failing."))


@dataclasses.dataclass(frozen=True)
class TrainerFlags:
  """Holders of define_trainer_flags' flags: ModelFlags, DeviceFlags, --jit_compile and LoopFlags in one
  (each holder also by its name here; model and device are the groups, for their setup)."""
  model: ModelFlags
  device: DeviceFlags
  model_dir: flags.FlagHolder
  vocab_path: flags.FlagHolder
  do_lower_case: flags.FlagHolder
  bert_config: flags.FlagHolder
  embedder_pooling: flags.FlagHolder
  cosine_score_scale: flags.FlagHolder
  seed: flags.FlagHolder
  strategy: flags.FlagHolder
  tpu: flags.FlagHolder
  num_cpu_devices: flags.FlagHolder
  mixed_precision: flags.FlagHolder
  jit_compile: flags.FlagHolder
  batch_size: flags.FlagHolder
  learning_rate: flags.FlagHolder
  adam_bias_correction: flags.FlagHolder
  num_train_steps: flags.FlagHolder
  save_checkpoints_steps: flags.FlagHolder
  keep_checkpoint_max: flags.FlagHolder
  log_every_steps: flags.FlagHolder
  steps_per_loop: flags.FlagHolder
  gradient_accumulation_steps: flags.FlagHolder

  def loop_options(self) -> loop.LoopOptions:
    return loop.LoopOptions(
        model_dir=self.model_dir.value, num_train_steps=self.num_train_steps.value,
        save_checkpoints_steps=self.save_checkpoints_steps.value,
        keep_checkpoint_max=self.keep_checkpoint_max.value,
        log_every_steps=self.log_every_steps.value, jit_compile=self.jit_compile.value,
        global_batch_size=self.batch_size.value, steps_per_loop=self.steps_per_loop.value,
        gradient_accumulation_steps=self.gradient_accumulation_steps.value)

  def setup(self):
    """Strategy (logical CPUs first), precision policy, BERT config; returns (strategy, bert_config)."""
    return self.device.setup(), self.model.bert()


def define_trainer_flags(batch_size: int, learning_rate: float, num_train_steps: int,
                         save_checkpoints_steps: int) -> TrainerFlags:
  """Defines the shared flags of a loop trainer with this binary's defaults, as its key flags."""
  model = define_model_flags()
  device = define_device_flags()
  jit_compile = define_jit_compile_flag()
  loop_flags = define_loop_flags(batch_size, learning_rate, num_train_steps, save_checkpoints_steps)
  return TrainerFlags(**vars(model), **vars(device), jit_compile=jit_compile, **vars(loop_flags),
                      model=model, device=device)
