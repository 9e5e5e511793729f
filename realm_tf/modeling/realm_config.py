"""The configuration a REALM/ICT/ORQA run shares between its processes.

The trainer writes MODEL_DIR/realm_config.json once; the refresher, the exporters and the evaluators
rebuild the same models and featurizer from it, so nothing has to be repeated on their command lines and
nothing can silently disagree (a refresher embedding with another sequence length or vocab than the
trainer's would produce a useless index).
"""

import dataclasses
from typing import Any, ClassVar, Dict, Optional, Tuple

from realm_tf import featurization
from realm_tf import json_config
from realm_tf import tokenization
from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib

CONFIG_NAME = "realm_config.json"


@dataclasses.dataclass(frozen=True)
class RealmConfig(json_config.JsonConfig):
  """Models and featurization of a run.

  Attributes:
    retriever_bert: BERT of the query/document embedders.
    reader_bert: BERT of the knowledge-augmented encoder (REALM) or span reader (ORQA).
    vocab_path, do_lower_case: the tokenizer (one vocab for both BERTs).
    vocab_sha256: the vocab file's sha256 (realm_tf.data.corpus.check_vocab compares it), or None.
    projection_size: D of the retriever (128); 0: no projection, the embedding is the pooled BERT vector
      (D = the retriever BERT's hidden size), which keeps a sentence-transformers model's own space.
    embedder_layer_norm_epsilon: 1e-12 (REALM embedder) or 1e-3 (ICT module).
    embedder_dropout_rate: dropout after the embedder's LayerNorm in training.
    embedder_pooling: "pooler" (the original) or "mean"; see realm_tf.modeling.embedder.
    cosine_score_scale: 0 (the original): scores are raw inner products; s > 0: L2-normalised embeddings
      scaled so that scores are s x cosine (a sentence-transformers retriever; see
      realm_tf.modeling.embedder).
    share_embedders: one tower for queries and documents.
    query_seq_len, candidate_seq_len, max_masks, num_candidates: REALM featurization (Q, C, M, N
      including the null document).
  """
  FILE_NAME: ClassVar[str] = CONFIG_NAME
  DESCRIPTION: ClassVar[str] = "a realm_tf run configuration"
  WRITTEN_BY: ClassVar[str] = ("bin/train_realm, bin/train_ict, bin/train_orqa, bin/train_fid_kd or "
                               "bin/convert_checkpoint")
  # The vocab may move between machines; it is compared by content (realm_tf.data.corpus.check_vocab).
  NOT_COMPARED: ClassVar[Tuple[str, ...]] = ("vocab_path", "vocab_sha256")

  retriever_bert: bert.BertConfig
  reader_bert: bert.BertConfig
  vocab_path: str
  do_lower_case: bool = True
  projection_size: int = 128
  embedder_layer_norm_epsilon: float = 1e-12
  embedder_dropout_rate: float = 0.0
  share_embedders: bool = True
  query_seq_len: int = 96
  candidate_seq_len: int = 288
  max_masks: int = 10
  num_candidates: int = 8
  # Last, with a default, so configs written before it existed still load (as "pooler").
  embedder_pooling: str = embedder_lib.POOLER
  # sha256 of the vocab file; the trainers record it (realm_tf.data.corpus.check_vocab returns it) and
  # check it on resume, the other processes before they build anything. None in configs written before.
  vocab_sha256: Optional[str] = None
  # After the fields above, with a default, so that configs written before it load (as 0).
  cosine_score_scale: float = 0.0

  def __post_init__(self):
    embedder_lib.check_pooling(self.embedder_pooling)

  @classmethod
  def from_dict(cls, values: Dict[str, Any]) -> "RealmConfig":
    values = dict(values)
    # Configs written while a retrieval score scale existed: 1.0 (REALM's raw inner products) is what
    # every model computes now; a run trained with another scale cannot be continued faithfully.
    scale = values.pop("retrieval_score_scale", 1.0)
    if scale != 1.0:
      raise ValueError(f"retrieval_score_scale={scale}: this run was trained with scaled retrieval "
                       "scores, which realm_tf no longer computes (REALM uses the raw inner products); "
                       "start a new --model_dir")
    for key in ("retriever_bert", "reader_bert"):
      values[key] = bert.BertConfig(**values[key])
    return cls(**values)

  def save_or_check(self, model_dir: str) -> "RealmConfig":
    """Writes MODEL_DIR/realm_config.json, or on a restart checks the saved one (check_matches; the vocab
    is compared by content, by realm_tf.data.corpus.check_vocab); a saved file without vocab_sha256
    (written before it existed) gets this config's recorded."""
    saved = super().save_or_check(model_dir)
    if saved.vocab_sha256 is None and self.vocab_sha256:
      self.save(model_dir)
    return saved

  @staticmethod
  def saved_vocab_sha256(model_dir: str) -> Optional[str]:
    """The vocab_sha256 MODEL_DIR/realm_config.json records (None without the file or the field)."""
    try:
      return RealmConfig.load(model_dir).vocab_sha256
    except FileNotFoundError:
      return None

  @property
  def embedding_dim(self) -> int:
    """The retriever's embedding (and index) width: projection_size, or the hidden size without one."""
    return self.projection_size or self.retriever_bert.hidden_size

  def tokenizer(self) -> tokenization.Tokenizer:
    tokenizer = tokenization.Tokenizer(self.vocab_path, self.do_lower_case)
    for name, config in (("retriever", self.retriever_bert), ("reader", self.reader_bert)):
      if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"vocab {self.vocab_path} has {tokenizer.vocab_size} tokens but the {name} "
                         f"BERT has vocab_size {config.vocab_size}; use the vocab of the checkpoint")
    return tokenizer

  def featurizer(self, tokenizer: Optional[tokenization.Tokenizer] = None) -> featurization.Featurizer:
    return featurization.Featurizer.from_tokenizer(tokenizer or self.tokenizer(),
                                                   query_seq_len=self.query_seq_len,
                                                   candidate_seq_len=self.candidate_seq_len,
                                                   max_masks=self.max_masks)

  def build_retriever(self) -> embedder_lib.Retriever:
    return embedder_lib.build_retriever(self.retriever_bert,
                                        self.projection_size,
                                        self.embedder_layer_norm_epsilon,
                                        self.embedder_dropout_rate,
                                        self.share_embedders,
                                        pooling=self.embedder_pooling,
                                        cosine_score_scale=self.cosine_score_scale)
