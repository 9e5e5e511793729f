"""The absl flags the non-trainer binaries share, each declared once here, in groups a binary defines
together.

  define_model_dir_flag    --model_dir
  define_vocab_flags       --vocab_path --do_lower_case
  define_device_flags      --strategy --tpu --num_cpu_devices --mixed_precision
  define_index_implementation_flag  --index_implementation
  define_indexes_kept_flag  --keep (published REALM indexes)
  define_skip_invalid_flag --skip_invalid
  define_recall_flags      --recall_ks (retriever recall@k of an evaluation)
  define_document_corpus_flags  --input_path --output_prefix --num_output_shards --skip_invalid
                           (a bin/generate_*_corpus job: raw documents in, TFRecord shards out)

As Model Garden's official/common/flags.py does, so the binaries agree on names, meanings and help; each
binary passes its own defaults. Only binaries call these and read the values; the library below them takes
plain arguments (flags_util turns values into library objects). The trainers and the refresher declare
their options as configuration trees instead, from which their flags are generated (realm_tf/config/).
"""

import dataclasses
from typing import Sequence

from absl import app
from absl import flags

from realm_tf.config import flags_util
from realm_tf.training import distribute

# The flags these functions define belong to the binary that calls them, as if that binary had defined
# them itself: absl's --help lists only the main module's key flags, so each binary's --help shows the
# shared flags beside its own (--helpfull still adds absl's and TensorFlow's). absl's documented way for
# a module whose functions define flags on behalf of their caller.
flags.disclaim_key_flags()


def define_model_dir_flag(help_text: str) -> flags.FlagHolder:
  return flags.DEFINE_string("model_dir", None, help_text, required=True)


@dataclasses.dataclass(frozen=True)
class VocabFlags:
  """Holders of define_vocab_flags' flags."""
  vocab_path: flags.FlagHolder
  do_lower_case: flags.FlagHolder


def define_vocab_flags() -> VocabFlags:
  """The BERT wordpiece vocab and its casing (a model's, or bin/generate_retrieval_corpus's tokenizer)."""
  return VocabFlags(vocab_path=flags.DEFINE_string("vocab_path", None, "BERT vocab file.", required=True),
                    do_lower_case=flags.DEFINE_bool("do_lower_case", True,
                                                    "Lower-case and strip accents (uncased BERT)."))


@dataclasses.dataclass(frozen=True)
class DeviceFlags:
  """Holders of define_device_flags' flags."""
  strategy: flags.FlagHolder
  tpu: flags.FlagHolder
  num_cpu_devices: flags.FlagHolder
  mixed_precision: flags.FlagHolder

  def setup(self):
    """The strategy (logical CPUs first), with the precision policy set; call before building models."""
    return flags_util.setup_device(self.strategy.value, self.tpu.value, self.num_cpu_devices.value,
                                   self.mixed_precision.value)


def define_device_flags(mixed_precision_help: str = "Keras precision policy.") -> DeviceFlags:
  """Where and in which precision the binary's models run."""
  return DeviceFlags(strategy=flags.DEFINE_enum("strategy", "cpu", distribute.STRATEGIES,
                                                "Distribution strategy."),
                     tpu=flags.DEFINE_string("tpu", "",
                                             "TPU name, grpc:// address, or local, for --strategy=tpu."),
                     num_cpu_devices=flags.DEFINE_integer("num_cpu_devices", 1,
                                                          "Logical CPUs for --strategy=mirrored on CPU."),
                     mixed_precision=flags.DEFINE_enum("mixed_precision", "float32",
                                                       ["float32", "mixed_bfloat16"], mixed_precision_help))


def define_index_implementation_flag(help_text: str) -> flags.FlagHolder:
  return flags.DEFINE_enum("index_implementation", "scann", ["scann", "brute_force"], help_text)


def define_indexes_kept_flag(help_text: str = "Published indexes to keep.") -> flags.FlagHolder:
  # Help per binary: bin/update_index keeps them only when it updates a REALM index.
  return flags.DEFINE_integer("keep", 3, help_text)


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
  return RecallFlags(
      recall_ks=flags.DEFINE_list("recall_ks", [str(k)
                                                for k in recall_ks], "Cut-offs of retriever recall@k."))


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
  return DocumentCorpusFlags(input_path=flags.DEFINE_string("input_path",
                                                            None,
                                                            "JSONL or TSV file of documents.",
                                                            required=True),
                             output_prefix=flags.DEFINE_string("output_prefix",
                                                               None,
                                                               "Path prefix of the output shards.",
                                                               required=True),
                             num_output_shards=flags.DEFINE_integer(
                                 "num_output_shards",
                                 50,
                                 "Number of shards (at most one per document).",
                                 lower_bound=1),
                             skip_invalid=define_skip_invalid_flag(
                                 "Skip malformed records (and report how many) instead of failing."))
