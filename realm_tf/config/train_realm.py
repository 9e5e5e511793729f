"""bin/train_realm's configuration tree: REALM pre-training (realm_tf.tasks.realm_trainer).

  model_dir
  data       pretraining_corpus_path retrieval_corpus_path
  model      vocab_path do_lower_case bert_config
  retriever  embedder_pooling cosine_score_scale projection_size query_seq_len embedder_layer_norm_epsilon
             candidate_seq_len
  realm      share_embedders max_masks num_candidates init_retriever_checkpoint init_reader_checkpoint
  index      bootstrap_index index_implementation max_index_staleness_steps check_index_every_batches
             index_swap_steps wait_for_index_seconds retrieval
  device     strategy tpu num_cpu_devices mixed_precision
  train      batch_size learning_rate ... seed (sections.Train)
"""

import dataclasses
from typing import ClassVar, Optional

from realm_tf.config import sections
from realm_tf.config.run_config import option
from realm_tf.config.run_config import section
from realm_tf.modeling import bert as bert_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.tasks import realm_trainer


@dataclasses.dataclass(frozen=True)
class RealmData:
  """What REALM reads: the pre-training sentences and the documents it retrieves."""
  pretraining_corpus_path: Optional[str] = option(None,
                                                  sections.PRETRAINING_CORPUS_HELP,
                                                  required=True,
                                                  daily=True)
  retrieval_corpus_path: Optional[str] = option(None,
                                                sections.RETRIEVAL_CORPUS_HELP,
                                                required=True,
                                                daily=True)


@dataclasses.dataclass(frozen=True)
class Realm:
  """REALM's model: the candidates, the masks and the warm starts."""
  share_embedders: bool = option(True, "One tower for queries and documents.")
  max_masks: int = option(10, "M.", lower_bound=1)
  num_candidates: int = option(8, "N, including the null document.", lower_bound=2)
  init_retriever_checkpoint: Optional[str] = option(None,
                                                    "ICT / REALM / converted checkpoint (or its directory).")
  init_reader_checkpoint: Optional[str] = option(
      None, "BERT checkpoint for the knowledge-augmented encoder (TF1 Google BERT, Hugging Face "
      "safetensors or Model Garden TF2).")


@dataclasses.dataclass(frozen=True)
class RealmIndex:
  """Which published index each batch retrieves from (realm_tf.tasks.realm_trainer)."""
  bootstrap_index: bool = option(False, "Build the step-0 index in-process when none is published yet.")
  index_implementation: str = option("scann",
                                     "MIPS implementation of a bootstrap index.",
                                     choices=("scann", "brute_force"))
  max_index_staleness_steps: Optional[int] = option(
      None, "Wait for the refresher when the index is older than this many steps. The trainer reports "
      "its step once per --steps_per_loop and batches are prepared a few ahead, so a batch may train on an "
      "index up to this + --steps_per_loop + the prefetched batches older.",
      lower_bound=0)
  check_index_every_batches: int = option(10, "Look for a newer index this often.", lower_bound=1)
  index_swap_steps: Optional[int] = option(
      None, "Fixed index swaps instead of the newest index: step s trains on the index of the checkpoint "
      "of step K * floor((s - 1) / K) for K this flag, waiting for it, so two runs of one seed train on "
      "the same indexes. A multiple of --save_checkpoints_steps; replaces --max_index_staleness_steps and "
      "--check_index_every_batches.")
  wait_for_index_seconds: Optional[float] = option(None,
                                                   "Give up waiting for an index after this.",
                                                   lower_bound=0.0)
  retrieval: str = option(
      realm_trainer.HOST,
      "Where the candidates are retrieved: host (the input pipeline embeds the masked queries "
      "with the index's stale query tower, searches and looks the documents up, per batch, on the "
      "trainer's host) or in_step (the same, as graph ops inside the train step over the index held in "
      "device memory; the host only masks queries: docs/pod_scale.md).",
      choices=realm_trainer.RETRIEVALS)


@dataclasses.dataclass(frozen=True)
class TrainRealmConfig:
  """bin/train_realm: REALM pre-training (realm_tf.tasks.realm_trainer)."""
  BINARY: ClassVar[str] = "train_realm"

  model_dir: Optional[str] = option(None, sections.MODEL_DIR_HELP, required=True, daily=True)
  data: RealmData = section(RealmData)
  model: sections.Bert = section(sections.Bert)
  retriever: sections.Retriever = section(sections.Retriever, query_seq_len=96, candidate_seq_len=288)
  realm: Realm = section(Realm)
  index: RealmIndex = section(RealmIndex)
  device: sections.Device = section(sections.Device)
  train: sections.Train = section(sections.Train,
                                  batch_size=16,
                                  learning_rate=3e-5,
                                  num_train_steps=1000,
                                  save_checkpoints_steps=100)

  def trainer_options(self, bert: bert_lib.BertConfig) -> realm_trainer.RealmTrainerOptions:
    """What realm_trainer.train takes; bert: model.bert_config resolved (Bert.bert())."""
    config = realm_config_lib.RealmConfig(retriever_bert=bert,
                                          reader_bert=bert,
                                          **sections.values(self.model, "vocab_path", "do_lower_case"),
                                          **dataclasses.asdict(self.retriever),
                                          **sections.values(self.realm, "share_embedders", "max_masks",
                                                            "num_candidates"))
    return realm_trainer.RealmTrainerOptions(config=config,
                                             loop=self.train.loop_options(self.model_dir),
                                             **dataclasses.asdict(self.data),
                                             **sections.values(self.train, "batch_size", "learning_rate",
                                                               "adam_bias_correction", "seed"),
                                             **sections.values(self.realm, "init_retriever_checkpoint",
                                                               "init_reader_checkpoint"),
                                             **dataclasses.asdict(self.index))
