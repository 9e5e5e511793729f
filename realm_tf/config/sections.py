"""The sections and options several trainers' configuration trees share, each declared once.

A tree (realm_tf/config/train_realm.py, ...) takes a section with its own defaults
(section(Train, batch_size=16, ...)). The keys of a file are the section and option names
(train.batch_size); an option's flag is its name (--batch_size), the flag the binaries had before
config files existed.
"""

import dataclasses
from typing import Any, Dict, Optional, Tuple

from realm_tf.config import flags_util
from realm_tf.config.run_config import option
from realm_tf.modeling import bert as bert_lib
from realm_tf.modeling import embedder
from realm_tf.training import distribute
from realm_tf.training import loop

_POOLING_HELP = ("Retriever embedding: BERT's [CLS] pooler (the original) or the mean of the last hidden "
                 "states (sentence-transformers; learns lexical matches sooner). Use the warm start's.")


def values(tree, *names: str) -> Dict[str, Any]:
  """{name: value} of some of a section's options, for the library's constructors of the same names."""
  return {name: getattr(tree, name) for name in names}


def names(cls) -> Tuple[str, ...]:
  """The option names of a section class (those of a base section, for a section that extends it)."""
  return tuple(f.name for f in dataclasses.fields(cls))


# Helps of the paths several trees have; each tree declares the option itself (`name: type = option(`, the
# form tools/docs_test.py reads as a flag of the tree's binary).
MODEL_DIR_HELP = "Checkpoints, summaries and the run's configuration files."
RETRIEVAL_CORPUS_HELP = "Prefix of the retrieval corpus (bin/generate_retrieval_corpus output)."
PRETRAINING_CORPUS_HELP = "Prefix of bin/generate_pretraining_corpus output."


@dataclasses.dataclass(frozen=True)
class Bert:
  """The BERT the run builds and its tokenizer."""
  vocab_path: Optional[str] = option(None, "BERT vocab file.", required=True, daily=True)
  do_lower_case: bool = option(True, "Lower-case and strip accents (uncased BERT).")
  bert_config: str = option("tiny", "Preset (tiny, bert_base) or a bert_config.json / config.json.")

  def bert(self) -> bert_lib.BertConfig:
    return flags_util.bert_config(self.bert_config, self.vocab_path)


@dataclasses.dataclass(frozen=True)
class Device:
  """Where and in which precision the run's models run."""
  strategy: str = option("cpu", "Distribution strategy.", choices=distribute.STRATEGIES, daily=True)
  tpu: str = option("", "TPU name, grpc:// address, or local, for --strategy=tpu.", daily=True)
  num_cpu_devices: int = option(1, "Logical CPUs for --strategy=mirrored on CPU.", lower_bound=1)
  mixed_precision: str = option("float32",
                                "Keras precision policy.",
                                choices=("float32", "mixed_bfloat16"),
                                daily=True)

  def setup(self):
    """The strategy (logical CPUs first), with the precision policy set; call before building models."""
    return flags_util.setup_device(self.strategy, self.tpu, self.num_cpu_devices, self.mixed_precision)


@dataclasses.dataclass(frozen=True)
class Train:
  """The training loop's batch, optimizer, length, checkpoints, logging and seed."""
  batch_size: int = option(16, "Global batch size.", lower_bound=1, daily=True)
  learning_rate: float = option(3e-5, "Peak learning rate.", lower_bound=0.0)
  adam_bias_correction: bool = option(False, "Adam bias correction (the original BERT optimizer had none).")
  num_train_steps: int = option(1000, "Steps to train.", lower_bound=0, daily=True)
  save_checkpoints_steps: int = option(1000, "Checkpoint interval.", lower_bound=1)
  keep_checkpoint_max: int = option(5, "Checkpoints kept.", lower_bound=1)
  log_every_steps: int = option(10, "Progress line interval.", lower_bound=1)
  steps_per_loop: int = option(
      1, "Steps run in one compiled loop between two looks of the host (on TPUs, e.g. 100); "
      "--save_checkpoints_steps and --log_every_steps must be multiples of it.",
      lower_bound=1)
  gradient_accumulation_steps: int = option(
      1, "Parts each replica's batch is cut into and run one after another, their gradients summed into "
      "one update: the update of the whole --batch_size with the memory of a part. Must divide the "
      "per-replica batch.",
      lower_bound=1)
  jit_compile: bool = option(
      True, "Compile the train steps with XLA, and a trainer's own corpus embedding (bin/train_realm's "
      "bootstrap index, bin/train_orqa's frozen index, bin/train_fid_kd's refreshed indexes).")
  seed: int = option(0, "Seed of initializations and of the example stream.")

  def loop_options(self, model_dir: str) -> loop.LoopOptions:
    return loop.LoopOptions(model_dir=model_dir,
                            global_batch_size=self.batch_size,
                            **values(self, "num_train_steps", "save_checkpoints_steps", "keep_checkpoint_max",
                                     "log_every_steps", "jit_compile", "steps_per_loop",
                                     "gradient_accumulation_steps"))


@dataclasses.dataclass(frozen=True)
class Embedding:
  """A retriever tower's embedding and its queries (every retriever: ICT's, REALM's, ORQA's, FiD-KD's)."""
  embedder_pooling: str = option(embedder.POOLER, _POOLING_HELP, choices=embedder.POOLINGS)
  cosine_score_scale: float = option(
      0.0, "0: retrieval scores are raw inner products (REALM, ORQA). s > 0: the retriever's embeddings are "
      "L2-normalised and scores are s x cosine, for a retriever warm-started from a sentence-transformers "
      "model (all-MiniLM-L6-v2: --embedder_pooling=mean --projection_size=0 --cosine_score_scale=20, its "
      "own training's scale).",
      lower_bound=0.0)
  projection_size: int = option(
      128, "Retriever dimension D; 0: no projection, D is the BERT's hidden size (keeps a sentence-"
      "transformers model's own space, e.g. all-MiniLM-L6-v2 with --embedder_pooling=mean).",
      lower_bound=0)
  query_seq_len: int = option(96, "Retriever query length Q.", lower_bound=1)


@dataclasses.dataclass(frozen=True)
class Retriever(Embedding):
  """A retriever over a retrieval corpus (bin/train_realm, bin/train_orqa, bin/train_fid_kd); its option
  names are RealmConfig's."""
  embedder_layer_norm_epsilon: float = option(
      1e-12, "Embedder LayerNorm epsilon (1e-3 for a retriever warm-started by ICT).", lower_bound=0.0)
  candidate_seq_len: int = option(288, "Retriever document length C.", lower_bound=1)


@dataclasses.dataclass(frozen=True)
class QaData:
  """A QA trainer's questions (bin/train_orqa, bin/train_fid_kd) and the corpus it retrieves from."""
  train_path: Optional[str] = option(
      None,
      "Training QA file (any realm_tf.data.qa.load_qa input: .jsonl, .json, .tsv or tfds:NAME/SPLIT).",
      required=True,
      daily=True)
  dev_path: Optional[str] = option(None,
                                   "Dev QA file for periodic evaluation and best-checkpoint selection.",
                                   daily=True)
  max_eval_examples: Optional[int] = option(None,
                                            "Evaluate on the first N dev questions only.",
                                            lower_bound=1)
  retrieval_corpus_path: Optional[str] = option(None, RETRIEVAL_CORPUS_HELP, required=True, daily=True)
