"""BERT's variable-name mapping: pretrained weights into Model Garden's BertEncoderV2 and its MaskedLM head.

Google's TF1 BERT, the released REALM/ORQA checkpoints and Hugging Face safetensors share Google BERT's
variable layout below some prefix (sources presents them all as TF1 names), so one mapping serves them
all: find (or take) the scope that holds `embeddings/word_embeddings`, strip it, and map the
BERT-relative name onto the encoder. The encoder's weights are found through its structure (embedding
layers, transformer blocks, pooler), not through Keras variable names, which change with the enclosing
name scope. The MLM head is the sibling `cls/predictions/` scope of the `bert/` scope. Model Garden TF2
checkpoints are restored object by object (restore_model_garden_checkpoint).

Loading is all or nothing in strict mode (the default): every value is read and checked first, and a
single error lists every model weight the source lacks, every shape mismatch (both shapes) and every
source variable inside the BERT scope that the model has no place for (e.g. a 12-layer checkpoint into a
6-layer model), with the file's path. Optimizer slots and global_step are skipped silently; every
other source variable that is not used (a retriever projection, the NSP head) is reported in the
ConversionReport, which the released-checkpoint loader (released) fills too.
"""

import dataclasses
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple, Union

from absl import logging
import numpy as np
import tensorflow as tf
import tf_keras
from official.nlp.modeling import layers as nlp_layers
from official.nlp.modeling import networks

from realm_tf.checkpoints import sources
from realm_tf.modeling import bert

# The variable whose scope is BERT's: everything else is named relative to the scope that holds it.
WORD_EMBEDDINGS = "embeddings/word_embeddings"
# BERT-relative scopes of the encoder body; an unused variable under one of them is a config mismatch.
_BODY_SCOPES = ("embeddings/", "encoder/", "pooler/")
_MLM_SCOPE = "cls/predictions/"
# Where a Model Garden TF2 checkpoint keeps the models (BertPretrainerV2.checkpoint_items).
_TF2_ENCODER_KEY = "encoder"
_TF2_MASKED_LM_KEY = "masked_lm"
_MAX_LISTED = 20


def find_bert_prefixes(source: sources.WeightSource) -> List[str]:
  """Every scope (e.g. "bert/", "module/module/module/bert/", "") that holds embeddings/word_embeddings."""
  found = set()
  for name in source.names():
    tf_name = source.tf_name(name)
    if not sources.is_skipped(tf_name) and (tf_name == WORD_EMBEDDINGS or
                                            tf_name.endswith("/" + WORD_EMBEDDINGS)):
      found.add(tf_name[:-len(WORD_EMBEDDINGS)])
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
  source_name: str  # TF1 name in the source, prefix included
  variable: tf.Variable
  source_shape: Tuple[int, ...]  # the TF1 shape; the value is reshaped to variable.shape


def _target(source_name: str, variable: tf.Variable, source_shape: Optional[Sequence[int]] = None) -> _Target:
  shape = tuple(variable.shape.as_list())
  return _Target(source_name, variable, tuple(source_shape) if source_shape is not None else shape)


def _ensure_built(encoder: networks.BertEncoderV2, masked_lm: Optional[nlp_layers.MaskedLM]) -> None:
  """Creates the variables (Keras makes them on the first call) with a one-token dummy batch."""
  if not encoder.weights:
    ids = tf.zeros([1, 1], tf.int32)
    encoder(bert.encoder_inputs(ids, tf.ones_like(ids), ids))
  if masked_lm is not None and not masked_lm.built:
    hidden = encoder.get_embedding_table().shape[1]
    masked_lm(tf.zeros([1, 1, hidden]), masked_positions=tf.zeros([1, 1], tf.int32))


def _check_supported(encoder: networks.BertEncoderV2, masked_lm: Optional[nlp_layers.MaskedLM]) -> None:
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
      targets.append(
          _target(f"{scope}attention/self/{name}/kernel", dense.kernel,
                  [hidden, int(np.prod(dense.kernel.shape[1:]))]))
      targets.append(
          _target(f"{scope}attention/self/{name}/bias", dense.bias, [int(np.prod(dense.bias.shape))]))
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
  targets += [
      _target(prefix + "pooler/dense/kernel", encoder.pooler_layer.kernel),
      _target(prefix + "pooler/dense/bias", encoder.pooler_layer.bias)
  ]
  return targets


def _masked_lm_targets(masked_lm: nlp_layers.MaskedLM, prefix: str) -> List[_Target]:
  return [
      _target(prefix + "transform/dense/kernel", masked_lm.dense.kernel),
      _target(prefix + "transform/dense/bias", masked_lm.dense.bias),
      _target(prefix + "transform/LayerNorm/gamma", masked_lm.layer_norm.gamma),
      _target(prefix + "transform/LayerNorm/beta", masked_lm.layer_norm.beta),
      _target(prefix + "output_bias", masked_lm.bias)
  ]


def build_masked_lm(encoder: networks.BertEncoderV2,
                    config: bert.BertConfig,
                    name: str = "cls") -> nlp_layers.MaskedLM:
  """BERT's MLM head (dense + config.hidden_act, LayerNorm, decoder tied to the word embeddings, output
  bias), built so that load_bert_weights can fill it."""
  _ensure_built(encoder, None)
  approximate = config.hidden_act == bert.GELU_TANH
  masked_lm = nlp_layers.MaskedLM(
      embedding_table=encoder.get_embedding_table(),
      activation=lambda x: tf_keras.activations.gelu(x, approximate=approximate),
      initializer=tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range),
      output="logits",
      name=name)
  _ensure_built(encoder, masked_lm)
  return masked_lm


# ------------------------------------------------------------------------------------------------
# Loading.


@dataclasses.dataclass(frozen=True)
class ConversionReport:
  """What loading weights did: one BERT (load_bert_weights, restore_model_garden_checkpoint) or every
  part of a released REALM/ORQA checkpoint (realm_tf.checkpoints.released).

  Attributes:
    source_path: the weights file (checkpoint prefix or safetensors file).
    mapped: source variables assigned to model weights (or, for a tied HF decoder, checked), as stored.
    unmapped: source variables neither mapped nor ignored; optimizer slots and step counters excluded.
    unset: model weights left at their initial values (only non-empty with strict=False).
    problems: why weights were left unset (only non-empty with strict=False).
    notes: adaptations made, e.g. a position table cut to the model's max_position_embeddings.
    num_skipped: optimizer slots, step counters and buffers skipped.
    prefix: the BERT scope in the source ("bert/", "module/module/module/bert/", ...; the TF2 root key
      for Model Garden checkpoints); "" for a released layout, which may hold several BERTs.
    layout: the released layout loaded (released.LAYOUTS); None for one BERT.
    ignored: a released layout's documented unused variables (the hub modules' MLM heads).
  """
  source_path: str
  mapped: Tuple[str, ...]
  unmapped: Tuple[str, ...]
  unset: Tuple[str, ...]
  problems: Tuple[str, ...] = ()
  notes: Tuple[str, ...] = ()
  num_skipped: int = 0
  prefix: str = ""
  layout: Optional[str] = None
  ignored: Tuple[str, ...] = ()

  def summary(self, list_all: bool = False) -> str:
    """Counts, then notes, problems and the unmapped, unset and ignored names: every one (and the
    mapped names) with list_all, else at most 20 of each kind."""
    layout = f" ({self.layout})" if self.layout else ""
    scope = f" from prefix {self.prefix!r}" if self.prefix else ""
    ignored = f"{len(self.ignored)} ignored (unused MLM heads), " if self.layout else ""
    lines = [
        f"{self.source_path}{layout}: {len(self.mapped)} variables mapped{scope}, "
        f"{len(self.unmapped)} unmapped, {ignored}{len(self.unset)} model weights unset, "
        f"{self.num_skipped} optimizer/step variables skipped"
    ]
    lines += [f"  note: {note}" for note in self.notes]
    lines += [f"  problem: {problem}" for problem in self.problems]
    for kind, names in (("unmapped", self.unmapped), ("unset", self.unset),
                        ("ignored", self.ignored)) + ((("mapped", self.mapped),) if list_all else ()):
      lines += _listed(f"  {kind}: ", names, list_all)
    return "\n".join(lines)

  def to_dict(self) -> Dict:
    return dataclasses.asdict(self)


def _listed(head: str, items: Sequence[str], list_all: bool = False) -> List[str]:
  if list_all:
    return [head + item for item in items]
  lines = [head + item for item in items[:_MAX_LISTED]]
  if len(items) > _MAX_LISTED:
    lines.append(f"{head}... and {len(items) - _MAX_LISTED} more")
  return lines


def shape_str(shape: Sequence[int]) -> str:
  return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def load_bert_weights(encoder: networks.BertEncoderV2,
                      source: Union[str, sources.WeightSource],
                      masked_lm: Optional[nlp_layers.MaskedLM] = None,
                      prefix: Optional[str] = None,
                      strict: bool = True) -> ConversionReport:
  """Assigns every weight of `encoder` (and of the tied `masked_lm` head) from a BERT source.

  Args:
    encoder: a BertEncoderV2 from bert.build_encoder (built here if it has not been called yet).
    source: a path (TF1/TF2 checkpoint prefix or directory, *.safetensors, or a directory holding
      model.safetensors) or a sources.WeightSource.
    masked_lm: optional MaskedLM tied to the encoder's word embeddings (see build_masked_lm); loaded
      from the `cls/predictions/` scope beside the BERT scope.
    prefix: the BERT scope in the source, e.g. "bert/" or "reader/module/bert/" ("bert." for Hugging
      Face names); found automatically (the scope holding embeddings/word_embeddings) when None.
      Model Garden TF2 checkpoints have fixed roots (encoder/, masked_lm/) and ignore it.
    strict: raise sources.ConversionError unless every model weight is assigned and nothing inside the BERT
      (and MLM) scope is left over. With False, what cannot be loaded is reported instead.
      Model Garden TF2 checkpoints are always restored strictly.

  Returns:
    A ConversionReport.
  """
  if isinstance(source, str):
    source = sources.open_source(source)
  if isinstance(source, sources.TFCheckpointSource) and source.is_object_based:
    return restore_model_garden_checkpoint(encoder, source, masked_lm=masked_lm)
  _ensure_built(encoder, masked_lm)
  _check_supported(encoder, masked_lm)

  prefix = _choose_prefix(source, prefix)
  mlm_prefix = masked_lm_prefix(prefix)
  by_tf_name = {source.tf_name(name): name for name in source.names()}
  targets = _encoder_targets(encoder, prefix)
  if masked_lm is not None:
    targets += _masked_lm_targets(masked_lm, mlm_prefix)

  values: Dict[int, np.ndarray] = {}  # index in targets -> value to assign
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
                      f"{target.variable.name} {shape_str(target.source_shape)})")
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
  unmapped = [
      name for name in source.names() if name not in used_set and not sources.is_skipped(source.tf_name(name))
  ]
  num_skipped = sum(sources.is_skipped(source.tf_name(name)) for name in source.names())
  scopes = [prefix + scope for scope in _BODY_SCOPES] + ([mlm_prefix] if masked_lm is not None else [])
  left_over = [name for name in unmapped if source.tf_name(name).startswith(tuple(scopes))]
  if left_over:
    problems.append(f"{len(left_over)} source variables inside the BERT scope have no model weight "
                    f"(does num_layers/the config match the checkpoint's?): " +
                    ", ".join(left_over[:_MAX_LISTED]) + (" ..." if len(left_over) > _MAX_LISTED else ""))

  if strict and problems:
    raise sources.ConversionError("\n  ".join([
        f"{source.path}: cannot load BERT weights from prefix {prefix!r} into encoder "
        f"{encoder.name!r}" + (f" and masked_lm {masked_lm.name!r}" if masked_lm is not None else "") +
        f" ({len(problems)} problems; strict=False loads what fits):"
    ] + problems))
  for index, value in values.items():
    targets[index].variable.assign(value)
  report = ConversionReport(source_path=source.path,
                            prefix=prefix,
                            mapped=tuple(used),
                            unmapped=tuple(unmapped),
                            unset=tuple(unset),
                            problems=tuple(problems),
                            notes=tuple(notes),
                            num_skipped=num_skipped)
  logging.info("%s", report.summary())
  return report


def _choose_prefix(source: sources.WeightSource, prefix: Optional[str]) -> str:
  candidates = find_bert_prefixes(source)
  if prefix is not None:
    prefix = source.normalize_prefix(prefix)
    if prefix not in candidates:
      raise sources.ConversionError(f"{source.path}: no {prefix}{WORD_EMBEDDINGS} in the source; BERT "
                                    f"scopes found: {candidates or 'none'}")
    return prefix
  if len(candidates) == 1:
    return candidates[0]
  if not candidates:
    examples = ", ".join(source.names()[:8])
    raise sources.ConversionError(f"{source.path}: no BERT in the source (no variable ending in "
                                  f"{WORD_EMBEDDINGS}); it holds {len(source.names())} variables, e.g. "
                                  f"{examples}")
  raise sources.ConversionError(f"{source.path}: BERT found under several prefixes {candidates}; pass "
                                "prefix= one of them")


def _fit(value: np.ndarray, name: str,
         target: _Target) -> Tuple[Optional[np.ndarray], Optional[str], Optional[str]]:
  """(value shaped for the variable, problem, note) for one source variable."""
  model_shape = tuple(target.variable.shape.as_list())
  shape = tuple(value.shape)
  if target.source_name.endswith("/" + WORD_EMBEDDINGS) or target.source_name == WORD_EMBEDDINGS:
    if len(shape) == 2 and shape[1] == model_shape[1] and shape[0] != model_shape[0]:
      return None, (f"checkpoint vocab {shape[0]} vs model vocab {model_shape[0]}: use the "
                    f"checkpoint's vocab.txt ({name} {shape_str(shape)} vs model "
                    f"{target.variable.name} {shape_str(model_shape)})"), None
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
    expected = shape_str(target.source_shape)
    if target.source_shape != model_shape:
      expected += f" (model {target.variable.name} {shape_str(model_shape)})"
    else:
      expected = f"{expected} ({target.variable.name})"
    return None, f"shape mismatch: {name}: source {shape_str(shape)} vs model {expected}", None
  return value.astype(target.variable.dtype.as_numpy_dtype).reshape(model_shape), None, note


def _check_tied_decoder(source: sources.WeightSource, by_tf_name: Dict[str, str], prefix: str,
                        mlm_prefix: str, problems: List[str]) -> List[str]:
  """A Hugging Face file may store the MLM decoder, which MaskedLM ties to the word embeddings (and the
  output bias): accept copies of those, refuse an untied decoder. Returns the names checked."""
  checked = []
  embeddings = by_tf_name.get(prefix + WORD_EMBEDDINGS)
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
                                    source: Union[str, sources.TFCheckpointSource],
                                    masked_lm: Optional[nlp_layers.MaskedLM] = None) -> ConversionReport:
  """Restores a Model Garden TF2 checkpoint written by tf.train.Checkpoint(encoder=...[, masked_lm=...])
  (BertPretrainerV2.checkpoint_items), checking that every model weight was matched.

  Raises:
    sources.ConversionError: naming the checkpoint, on a vocab or shape mismatch, a different number of
      transformer layers, or model weights the checkpoint does not hold. After a shape mismatch found
      by tf.train.Checkpoint the model may be partly restored; discard it.
  """
  if isinstance(source, str):
    source = sources.TFCheckpointSource(source)
  _ensure_built(encoder, masked_lm)
  _check_supported(encoder, masked_lm)
  path = source.path
  names = source.names()
  roots = sorted({name.split("/")[0] for name in names if name.endswith(sources.TF2_VALUE_SUFFIX)})
  keys = [_TF2_ENCODER_KEY] + ([_TF2_MASKED_LM_KEY] if masked_lm is not None else [])
  missing_roots = [key for key in keys if key not in roots]
  if missing_roots:
    raise sources.ConversionError(
        f"{path}: the Model Garden checkpoint has no {missing_roots} object(s); its top-level objects "
        f"are {roots} (expected tf.train.Checkpoint(encoder=..., masked_lm=...), as "
        "BertPretrainerV2.checkpoint_items)")

  layer_ids = {
      int(m.group(1)) for m in (re.match(rf"{_TF2_ENCODER_KEY}/_transformer_layers/(\d+)/", n)
                                for n in names) if m
  }
  if len(layer_ids) != len(encoder.transformer_layers):
    raise sources.ConversionError(
        f"{path}: the checkpoint's encoder has {len(layer_ids)} transformer layers, the model "
        f"{len(encoder.transformer_layers)}; build the encoder with num_layers from the checkpoint's "
        "config")
  vocab = encoder.get_embedding_table().shape[0]
  for name in (f"{_TF2_ENCODER_KEY}/_embedding_layer/embeddings{sources.TF2_VALUE_SUFFIX}",
               f"{_TF2_MASKED_LM_KEY}/embedding_table{sources.TF2_VALUE_SUFFIX}"):
    if name in names and source.read(name).shape[0] != vocab:
      raise sources.ConversionError(f"{path}: checkpoint vocab {source.read(name).shape[0]} vs model vocab "
                                    f"{vocab}: use the checkpoint's vocab.txt ({name})")

  objects = {_TF2_ENCODER_KEY: encoder}
  if masked_lm is not None:
    objects[_TF2_MASKED_LM_KEY] = masked_lm
  try:
    status = tf.train.Checkpoint(**objects).read(path)
    status.assert_existing_objects_matched()
    status.expect_partial()  # Other objects (optimizer, other towers) may share the checkpoint.
  except (ValueError, AssertionError) as e:
    raise sources.ConversionError(
        f"{path}: the Model Garden checkpoint does not match encoder {encoder.name!r}" +
        (f" and masked_lm {masked_lm.name!r}" if masked_lm is not None else "") + f": {e}") from e
  used = [n for n in names if n.split("/")[0] in objects and not sources.is_skipped(n)]
  used_set = set(used)
  report = ConversionReport(source_path=path,
                            prefix=_TF2_ENCODER_KEY + "/",
                            mapped=tuple(used),
                            unmapped=tuple(
                                n for n in names if n not in used_set and not sources.is_skipped(n)),
                            unset=(),
                            num_skipped=sum(sources.is_skipped(n) for n in names))
  logging.info("%s", report.summary())
  return report


def load_hf_bert_directory(directory: str,
                           name: str = "bert") -> Tuple[bert.BertConfig, networks.BertEncoderV2]:
  """(config, loaded encoder) from a Hugging Face BERT directory: model.safetensors, config.json and
  vocab.txt, e.g. the all-MiniLM-L6-v2 model (see sources.minilm_model_dir)."""
  for required in ("model.safetensors", "config.json", "vocab.txt"):
    if not tf.io.gfile.exists(os.path.join(directory, required)):
      raise sources.ConversionError(f"{directory}: no {required}; expected a Hugging Face BERT directory "
                                    "(model.safetensors, config.json, vocab.txt)")
  config = sources.config_from_source(os.path.join(directory, "config.json"))
  encoder = bert.build_encoder(config, name=name)
  load_bert_weights(encoder, os.path.join(directory, "model.safetensors"))
  return config, encoder
