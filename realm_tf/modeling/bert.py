"""BERT configuration and the Model Garden encoder every realm_tf model is built on.

One BertConfig describes the transformer of the retriever towers, the knowledge-augmented encoder and the
ORQA reader. It reads Google's bert_config.json (TF1 BERT, the REALM release) and Hugging Face's
config.json, and builds `official.nlp.modeling.networks.BertEncoderV2` (layer norm epsilon 1e-12, as
BERT). The activation matters for converted weights: the original REALM/ORQA and Google BERT use the tanh
approximation of gelu ("gelu_new"), Hugging Face "gelu" models (e.g. all-MiniLM-L6-v2) the exact erf one;
the wrong one drifts outputs by ~3e-3.
"""

import dataclasses
import json
from typing import Any, Dict, Optional

import tensorflow as tf
import tf_keras
from official.nlp.modeling import networks

GELU_TANH = "gelu_tanh"
GELU_EXACT = "gelu_exact"
_ACTIVATIONS = {
    GELU_TANH: lambda x: tf_keras.activations.gelu(x, approximate=True),
    GELU_EXACT: lambda x: tf_keras.activations.gelu(x, approximate=False),
}
# Names used by Google's bert_config.json and Hugging Face's config.json.
_ACTIVATION_ALIASES = {
    "gelu": GELU_EXACT,
    "gelu_new": GELU_TANH,
    "gelu_pytorch_tanh": GELU_TANH,
    "gelu_fast": GELU_TANH,
    GELU_TANH: GELU_TANH,
    GELU_EXACT: GELU_EXACT
}

# Keys a config file must hold; the others default to BERT-base's (a config without the shape keys is
# most likely not a BERT config at all, and would silently build BERT-base).
REQUIRED_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
CONFIG_NEEDS = ("a BERT config (Google's bert_config.json or Hugging Face's config.json) needs "
                "vocab_size, hidden_size, num_hidden_layers, num_attention_heads and intermediate_size "
                "(hidden_act, max_position_embeddings, type_vocab_size, dropout rates and "
                "initializer_range default to BERT-base's)")


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """Shape and numerics of a BERT encoder.

  Attributes:
    vocab_size: wordpiece vocabulary size; must equal the vocab file's line count.
    hidden_size, num_layers, num_attention_heads, intermediate_size: transformer shape.
    hidden_act: GELU_TANH (original BERT/REALM) or GELU_EXACT (Hugging Face "gelu").
    max_position_embeddings: longest sequence the position table holds.
    type_vocab_size: number of segment ids.
    hidden_dropout_prob, attention_probs_dropout_prob: dropout rates in training.
    initializer_range: stddev of the truncated normal initializer.
  """
  vocab_size: int
  hidden_size: int = 768
  num_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = GELU_TANH
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  hidden_dropout_prob: float = 0.1
  attention_probs_dropout_prob: float = 0.1
  initializer_range: float = 0.02

  def __post_init__(self):
    if self.hidden_act not in (GELU_TANH, GELU_EXACT):
      raise ValueError(f"hidden_act must be {GELU_TANH!r} or {GELU_EXACT!r}, got {self.hidden_act!r}")
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                       f"{self.num_attention_heads}")

  @classmethod
  def from_dict(cls, values: Dict[str, Any], huggingface: Optional[bool] = None) -> "BertConfig":
    """From a Google bert_config.json or Hugging Face config.json dict (unknown keys ignored).

    "gelu" means different things in the two: Google BERT's modeling.gelu is the tanh approximation,
    Hugging Face's "gelu" the exact erf one ("gelu_new" is its tanh form). huggingface=None tells them
    apart by the keys only Hugging Face writes (model_type, architectures, layer_norm_eps).
    """
    if not isinstance(values, dict):
      raise ValueError(f"a BERT config is a JSON object, got {type(values).__name__}; {CONFIG_NEEDS}")
    missing = [
        k for k in REQUIRED_KEYS
        if k not in values and not (k == "num_hidden_layers" and "num_layers" in values)
    ]
    if missing:
      raise ValueError(f"missing {missing}; {CONFIG_NEEDS}")
    if huggingface is None:
      huggingface = any(k in values for k in ("model_type", "architectures", "layer_norm_eps"))
    act = values.get("hidden_act", "gelu_new")
    if act == "gelu" and not huggingface:
      act = "gelu_new"
    if act not in _ACTIVATION_ALIASES:
      raise ValueError(f"unsupported hidden_act {act!r}; use one of {sorted(_ACTIVATION_ALIASES)}")
    return cls(vocab_size=int(values["vocab_size"]),
               hidden_size=int(values.get("hidden_size", 768)),
               num_layers=int(values.get("num_hidden_layers", values.get("num_layers", 12))),
               num_attention_heads=int(values.get("num_attention_heads", 12)),
               intermediate_size=int(values.get("intermediate_size", 3072)),
               hidden_act=_ACTIVATION_ALIASES[act],
               max_position_embeddings=int(values.get("max_position_embeddings", 512)),
               type_vocab_size=int(values.get("type_vocab_size", 2)),
               hidden_dropout_prob=float(values.get("hidden_dropout_prob", 0.1)),
               attention_probs_dropout_prob=float(values.get("attention_probs_dropout_prob", 0.1)),
               initializer_range=float(values.get("initializer_range", 0.02)))

  @classmethod
  def from_json_file(cls, path: str) -> "BertConfig":
    """From a bert_config.json / config.json; errors name the file and what a config needs."""
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f"BERT config {path} does not exist; {CONFIG_NEEDS}")
    with tf.io.gfile.GFile(path) as f:
      try:
        values = json.load(f)
      except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a JSON BERT config ({e}); {CONFIG_NEEDS}") from e
    try:
      return cls.from_dict(values)
    except (KeyError, TypeError, ValueError) as e:
      raise ValueError(f"{path}: {e}") from e

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


def tiny_config(vocab_size: int, **overrides) -> BertConfig:
  """The laptop-sized BERT of tests and bin/demo: 2 layers, hidden 64, 2 heads."""
  values = dict(vocab_size=vocab_size,
                hidden_size=64,
                num_layers=2,
                num_attention_heads=2,
                intermediate_size=128,
                max_position_embeddings=256)
  values.update(overrides)
  return BertConfig(**values)


def bert_base_config(vocab_size: int = 30522) -> BertConfig:
  """BERT-base uncased, as in REALM/ORQA: 12 layers, hidden 768, 12 heads, tanh gelu."""
  return BertConfig(vocab_size=vocab_size)


def minilm_l6_config() -> BertConfig:
  """all-MiniLM-L6-v2: 6 layers, hidden 384, 12 heads, intermediate 1536, exact gelu."""
  return BertConfig(vocab_size=30522,
                    hidden_size=384,
                    num_layers=6,
                    num_attention_heads=12,
                    intermediate_size=1536,
                    hidden_act=GELU_EXACT)


PRESETS = {"tiny": tiny_config, "bert_base": bert_base_config}


def activation(name: str):
  """The activation function for GELU_TANH or GELU_EXACT."""
  return _ACTIVATIONS[name]


def build_encoder(config: BertConfig, name: str = "bert") -> networks.BertEncoderV2:
  """A BertEncoderV2 with this config; call it on {input_word_ids, input_mask, input_type_ids}."""
  return networks.BertEncoderV2(
      vocab_size=config.vocab_size,
      hidden_size=config.hidden_size,
      num_layers=config.num_layers,
      num_attention_heads=config.num_attention_heads,
      inner_dim=config.intermediate_size,
      inner_activation=_ACTIVATIONS[config.hidden_act],
      max_sequence_length=config.max_position_embeddings,
      type_vocab_size=config.type_vocab_size,
      output_dropout=config.hidden_dropout_prob,
      attention_dropout=config.attention_probs_dropout_prob,
      initializer=tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range),
      name=name)


def encoder_inputs(token_ids, mask, segment_ids) -> Dict[str, tf.Tensor]:
  """BertInputs fields -> the dict BertEncoderV2 takes."""
  return {"input_word_ids": token_ids, "input_mask": mask, "input_type_ids": segment_ids}
