"""Google's released REALM / ORQA checkpoints: layout detection, config inference, loading into models.

The release (original_realm_orqa.md section 5, peers.md section 1.3) ships TF1 name-based checkpoints
whose BERTs sit under TF-Hub module scopes nested to different depths:

  realm_bert       gs://realm-data/cc_news_pretrained/bert (the knowledge-augmented encoder)
                     bert/...                        BERT body
                     cls/predictions/...             MLM head (transform dense + LayerNorm, output_bias;
                                                     the decoder is tied to the word embeddings)
                   -> KnowledgeAugmentedEncoder (encoder + masked_lm "cls")
  realm_embedder   gs://realm-data/cc_news_pretrained/embedder (the retriever)
                     module/module/module/bert/...   BERT body
                     module/module/dense/{kernel,bias}        pooled_output -> 128 projection
                     module/module/LayerNorm/{gamma,beta}     BERT-style LayerNorm, epsilon 1e-12
                     module/module/module/cls/...    the hub module's MLM head: unused, IGNORED
                   -> RetrieverEmbedder (encoder, projection, layer_norm) / Retriever (its shared tower,
                      or every tower when the towers are separate)
  orqa_from_realm  gs://realm-data/orqa_{nq,wq}_model_from_realm (fine-tuned ORQA)
                     module/module/module/module/bert/...     retriever BERT
                     module/module/module/{dense,LayerNorm}/  retriever projection + LayerNorm
                     reader/module/bert/...                   reader BERT
                     reader/dense/{kernel,bias}               hidden -> 2 x span_hidden (start | end)
                     reader/dense_1/{kernel,bias}             span_hidden -> 1
                     reader/layer_normalization/{gamma,beta}  Keras LayerNormalization, epsilon 1e-3
                     module/.../cls/..., reader/module/cls/...  unused MLM heads: IGNORED
                   -> Retriever + SpanReader
  block_emb        <embedder>/encoded/encoded.ckpt: block_emb float32 [num_blocks, 128]
                   -> a MIPS index whose row i is block i (the i-th record of ORQA's blocks.tfr)

The names are matched by suffix, never by a fixed depth: a BERT is any scope holding
embeddings/word_embeddings (bert_mapping.find_bert_prefixes, which also maps the BERT bodies), and a
head is found in the deepest scope ENCLOSING its BERT that holds the head's variables (the projection
`dense/` + `LayerNorm/` of a retriever; `dense/` + `dense_1/` + `layer_normalization/` of a reader). A
BERT with neither but a `cls/predictions/` sibling is a knowledge-augmented encoder. So a re-exported
module one hub level deeper or shallower still converts. Which layout a checkpoint holds is decided from
these roles (detect_layout) and always said; anything else is refused with the BERT scopes and
top-level scopes that were found.

Optimizer slots (adam_m, adam_v, ...) and global_step are skipped. Every other variable is accounted
for in the ConversionReport (bert_mapping): mapped (assigned), ignored (the documented unused MLM
heads), or unmapped (reported, never silently dropped); model weights the checkpoint could not fill are
listed as unset. Strict loading (the default) raises ConversionError (sources) naming the checkpoint
file and every missing or misshapen variable; after such an error the model may be partly assigned,
so discard it.

Numerics are the originals': BERT with tanh gelu (bert.GELU_TANH) and LayerNorm epsilon 1e-12, the
embedder projection applied to BERT's pooled_output (tanh pooler), the embedder LayerNorm epsilon 1e-12,
the reader span LayerNorm epsilon 1e-3. Loading into a model built with other numerics is refused.

BERT config: from a bert_config.json when one is given (checked against the checkpoint's shapes), else
inferred from the shapes: vocab_size and hidden_size from embeddings/word_embeddings, max positions
from position_embeddings, type_vocab_size from token_type_embeddings, num_layers from the
encoder/layer_<i> scopes, intermediate_size from layer_0/intermediate/dense. The number of attention
heads is not visible in the shapes (the TF1 query kernel is [hidden, hidden]): it comes from
num_attention_heads when given, else hidden_size / 64 (BERT's head size: 12 for BERT-base), and is an
error when 64 does not divide hidden_size.

Sequence lengths are not in the checkpoints either: a converted retriever or ORQA model runs with the
originals' (ORIGINAL_SEQUENCE_LENGTHS) cut to its BERT's position table, or with lengths given within
it (sequence_lengths). Writing realm_tf checkpoints and indexes from these models is the conversion
job's (realm_tf.conversion.released_conversion, bin/convert_checkpoint).
"""

import dataclasses
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from realm_tf import tokenization
from realm_tf.checkpoints import bert_mapping
from realm_tf.checkpoints import sources
from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import knowledge_augmented_encoder as kae_lib
from realm_tf.modeling import reader as reader_lib

AUTO = "auto"
REALM_BERT = "realm_bert"
REALM_EMBEDDER = "realm_embedder"
ORQA_FROM_REALM = "orqa_from_realm"
BLOCK_EMB = "block_emb"
LAYOUTS = (REALM_BERT, REALM_EMBEDDER, ORQA_FROM_REALM, BLOCK_EMB)
_DESCRIPTIONS = {
    REALM_BERT: "REALM knowledge-augmented encoder (cc_news_pretrained/bert)",
    REALM_EMBEDDER: "REALM retriever embedder (cc_news_pretrained/embedder)",
    ORQA_FROM_REALM: "ORQA fine-tuned from REALM (orqa_{nq,wq}_model_from_realm): retriever + reader",
    BLOCK_EMB: "precomputed block embeddings (encoded/encoded.ckpt)",
}

# The sequence lengths the originals ran with (reference/original_realm_orqa.md section 4): REALM's
# launcher 96 / 288; ORQA's query 64 (ICT's), block 288 (encode_blocks.py: what block_emb embeds) and
# reader 320 (288 + 32). A converted model gets these, cut to its BERT's position table (a smaller BERT
# cannot embed more positions); sequence_lengths() explains the overrides.
ORIGINAL_SEQUENCE_LENGTHS = {
    REALM_EMBEDDER: {
        "query_seq_len": 96,
        "candidate_seq_len": 288
    },
    ORQA_FROM_REALM: {
        "query_seq_len": 64,
        "candidate_seq_len": 288,
        "reader_seq_len": 320
    },
}
ORQA_MAX_SPAN_WIDTH = 10
EMBEDDER_LAYER_NORM_EPSILON = 1e-12
READER_LAYER_NORM_EPSILON = 1e-3
BERT_HEAD_SIZE = 64
BLOCK_EMB_VARIABLE = "block_emb"
VOCAB_NAME = "vocab.txt"
_LAYER = re.compile(r"encoder/layer_(\d+)/")

# ------------------------------------------------------------------------------------------------
# Layout detection.


@dataclasses.dataclass(frozen=True)
class Layout:
  """Which released layout a checkpoint holds and where its parts are.

  Attributes:
    name: one of LAYOUTS.
    checkpoint_path: the checkpoint prefix.
    encoder_bert: realm_bert: the BERT scope ("bert/"); its MLM head is the sibling cls/predictions/.
    retriever_bert: the retriever's BERT scope ("module/module/module/bert/").
    projection_scope: the scope of the retriever's dense/ and LayerNorm/ ("module/module/").
    reader_bert: the reader's BERT scope ("reader/module/bert/").
    span_head_scope: the scope of the reader's dense/, dense_1/, layer_normalization/ ("reader/").
    block_emb: the name of the block embedding variable.
    ignored: the documented unused variables (MLM heads of the retriever / reader hub modules).
  """
  name: str
  checkpoint_path: str
  encoder_bert: Optional[str] = None
  retriever_bert: Optional[str] = None
  projection_scope: Optional[str] = None
  reader_bert: Optional[str] = None
  span_head_scope: Optional[str] = None
  block_emb: Optional[str] = None
  ignored: Tuple[str, ...] = ()

  def describe(self) -> str:
    """One line for logs and the converter's output."""
    parts = []
    if self.encoder_bert is not None:
      parts.append(f"BERT under {self.encoder_bert!r}, MLM head under "
                   f"{bert_mapping.masked_lm_prefix(self.encoder_bert)!r}")
    if self.retriever_bert is not None:
      parts.append(f"retriever BERT under {self.retriever_bert!r}, projection and LayerNorm under "
                   f"{self.projection_scope!r}")
    if self.reader_bert is not None:
      parts.append(f"reader BERT under {self.reader_bert!r}, span head under {self.span_head_scope!r}")
    if self.block_emb is not None:
      parts.append(f"variable {self.block_emb!r}")
    if self.ignored:
      parts.append(f"{len(self.ignored)} unused MLM-head variables ignored")
    return (f"{self.checkpoint_path}: layout {self.name} ({_DESCRIPTIONS[self.name]}): " + "; ".join(parts))


def open_checkpoint(checkpoint: Union[str, sources.TFCheckpointSource],
                    layout: str = AUTO) -> sources.TFCheckpointSource:
  """The reader of a released checkpoint (see sources.resolve_checkpoint for the paths accepted; with
  layout block_emb a TF-Hub module directory means its encoded/encoded.ckpt).

  Raises:
    sources.ConversionError: for an object-based TF2 checkpoint (realm_tf's own: no conversion needed).
  """
  if isinstance(checkpoint, sources.TFCheckpointSource):
    return checkpoint
  source = sources.TFCheckpointSource(checkpoint, block_emb=layout == BLOCK_EMB)
  if source.is_object_based:
    raise sources.ConversionError(f"{source.path} is an object-based TF2 checkpoint (names end in "
                                  "/.ATTRIBUTES/VARIABLE_VALUE), not one of Google's released TF1 "
                                  "checkpoints; realm_tf checkpoints need no conversion")
  return source


def _enclosing_scopes(scope: str) -> List[str]:
  """The scopes strictly enclosing `scope`, deepest first: "a/b/c/" -> ["a/b/", "a/", ""]."""
  parts = scope.rstrip("/").split("/")
  return ["".join(p + "/" for p in parts[:i]) for i in range(len(parts) - 1, -1, -1)]


def _module_scope(bert_prefix: str) -> str:
  """The hub module holding a BERT: "module/module/module/bert/" -> "module/module/module/"."""
  return bert_prefix[:-len("bert/")] if bert_prefix.endswith("bert/") else bert_prefix


def _find_head(names: set, bert_prefix: str, required: Sequence[str]) -> Optional[str]:
  """The deepest scope enclosing bert_prefix that holds every `required` variable (suffix names)."""
  for scope in _enclosing_scopes(bert_prefix):
    if all(scope + name in names for name in required):
      return scope
  return None


# What identifies a head (its other variables are then required by the loader, which names the missing).
_PROJECTION_VARIABLES = ("dense/kernel", "LayerNorm/gamma")
_SPAN_HEAD_VARIABLES = ("dense/kernel", "dense_1/kernel", "layer_normalization/gamma")


def _top_level_summary(names: Sequence[str]) -> str:
  counts: Dict[str, int] = {}
  for name in names:
    top = name.split("/")[0] + ("/" if "/" in name else "")
    counts[top] = counts.get(top, 0) + 1
  return ", ".join(f"{top} ({n})" for top, n in sorted(counts.items())) or "nothing"


def detect_layout(checkpoint: Union[str, sources.TFCheckpointSource], expected: str = AUTO) -> Layout:
  """Which released layout a checkpoint holds, from its variable names.

  Args:
    checkpoint: a checkpoint prefix or directory (a hub module directory means its variables).
    expected: AUTO, or a layout the checkpoint must hold (a mismatch is an error naming both).

  Raises:
    sources.ConversionError: naming the file, for an unknown layout (listing the BERT scopes and their
      roles, the top-level scopes and a few names found) or one other than `expected`.
  """
  if expected != AUTO and expected not in LAYOUTS:
    raise ValueError(f"unknown layout {expected!r}; choose {AUTO} or one of {list(LAYOUTS)}")
  checkpoint = open_checkpoint(checkpoint, expected)
  names = checkpoint.model_names()
  name_set = set(names)
  prefixes = bert_mapping.find_bert_prefixes(checkpoint)
  roles: Dict[str, Tuple[str, Optional[str]]] = {}  # BERT prefix -> (role, head scope)
  for prefix in prefixes:
    span_head = _find_head(name_set, prefix, _SPAN_HEAD_VARIABLES)
    projection = _find_head(name_set, prefix, _PROJECTION_VARIABLES)
    if span_head is not None:
      roles[prefix] = ("reader", span_head)
    elif projection is not None:
      roles[prefix] = ("retriever", projection)
    elif bert_mapping.masked_lm_prefix(prefix) + "output_bias" in name_set:
      roles[prefix] = ("masked_lm", None)
    else:
      roles[prefix] = ("bare", None)
  by_role: Dict[str, List[str]] = {}
  for prefix, (role, _) in roles.items():
    by_role.setdefault(role, []).append(prefix)
  block_embs = [n for n in names if n == BLOCK_EMB_VARIABLE or n.endswith("/" + BLOCK_EMB_VARIABLE)]

  def ignored_under(prefix: str) -> Tuple[str, ...]:
    cls_scope = _module_scope(prefix) + "cls/"
    return tuple(n for n in names if n.startswith(cls_scope))

  layout = None
  path = checkpoint.path
  counts = {role: len(found) for role, found in by_role.items()}
  if not prefixes and len(block_embs) == 1:
    layout = Layout(BLOCK_EMB, path, block_emb=block_embs[0])
  elif counts == {"reader": 1, "retriever": 1} and not block_embs:
    retriever, reader = by_role["retriever"][0], by_role["reader"][0]
    layout = Layout(ORQA_FROM_REALM,
                    path,
                    retriever_bert=retriever,
                    projection_scope=roles[retriever][1],
                    reader_bert=reader,
                    span_head_scope=roles[reader][1],
                    ignored=ignored_under(retriever) + ignored_under(reader))
  elif counts == {"retriever": 1} and not block_embs:
    retriever = by_role["retriever"][0]
    layout = Layout(REALM_EMBEDDER,
                    path,
                    retriever_bert=retriever,
                    projection_scope=roles[retriever][1],
                    ignored=ignored_under(retriever))
  elif counts == {"masked_lm": 1} and not block_embs:
    layout = Layout(REALM_BERT, path, encoder_bert=by_role["masked_lm"][0])
  if layout is None:
    found = "; ".join(f"{prefix!r} ({role})" for prefix, (role, _) in sorted(roles.items())) or "none"
    raise sources.ConversionError(
        f"{path}: not a released REALM/ORQA layout. BERT scopes found (a scope holding "
        f"{bert_mapping.WORD_EMBEDDINGS}): {found}; block_emb variables: {block_embs or 'none'}; "
        "top-level scopes: "
        f"{_top_level_summary(names)}; e.g. {', '.join(names[:8]) or 'no variables'}. Known layouts: " +
        "; ".join(f"{n}: {d}" for n, d in _DESCRIPTIONS.items()) + " (see realm_tf/checkpoints/released.py)")
  if expected not in (AUTO, layout.name):
    raise sources.ConversionError(f"{path}: layout {expected} was asked for, but the checkpoint holds "
                                  f"{layout.describe()}; pass layout={AUTO} (--layout={AUTO}) or the "
                                  "matching checkpoint")
  return layout


# ------------------------------------------------------------------------------------------------
# BERT configuration.


def _shape_fields(checkpoint: sources.TFCheckpointSource, bert_prefix: str) -> Dict[str, int]:
  """Every BertConfig field the shapes of the BERT under bert_prefix determine."""
  shapes = checkpoint.shapes
  needed = [
      bert_prefix + n
      for n in (bert_mapping.WORD_EMBEDDINGS, "embeddings/position_embeddings",
                "embeddings/token_type_embeddings", "encoder/layer_0/intermediate/dense/kernel")
  ]
  missing = [n for n in needed if n not in shapes]
  if missing:
    raise sources.ConversionError(f"{checkpoint.path}: cannot infer the BERT config under {bert_prefix!r}: "
                                  f"missing {missing}")
  layers = {
      int(m.group(1))
      for m in (_LAYER.match(n[len(bert_prefix):]) for n in shapes if n.startswith(bert_prefix))
      if m
  }
  if layers != set(range(len(layers))):
    raise sources.ConversionError(f"{checkpoint.path}: the BERT under {bert_prefix!r} has layers "
                                  f"{sorted(layers)}, not 0..n-1; the checkpoint is incomplete")
  return {
      "vocab_size": int(shapes[needed[0]][0]),
      "hidden_size": int(shapes[needed[0]][1]),
      "num_layers": len(layers),
      "intermediate_size": int(shapes[needed[3]][1]),
      "max_position_embeddings": int(shapes[needed[1]][0]),
      "type_vocab_size": int(shapes[needed[2]][0])
  }


def infer_bert_config(checkpoint: Union[str, sources.TFCheckpointSource],
                      bert_prefix: str,
                      num_attention_heads: Optional[int] = None) -> bert.BertConfig:
  """The BertConfig of the BERT under bert_prefix, from the checkpoint's shapes (see the module doc).

  Raises:
    sources.ConversionError: naming the file, when a variable the shapes come from is missing, or when the
      number of heads cannot be inferred (pass num_attention_heads).
  """
  checkpoint = open_checkpoint(checkpoint)
  fields = _shape_fields(checkpoint, bert_prefix)
  hidden_size = fields["hidden_size"]
  if num_attention_heads is None:
    if hidden_size % BERT_HEAD_SIZE:
      raise sources.ConversionError(
          f"{checkpoint.path}: the number of attention heads is not in the checkpoint and hidden_size "
          f"{hidden_size} ({bert_prefix}{bert_mapping.WORD_EMBEDDINGS}) is not a multiple of BERT's "
          f"head size {BERT_HEAD_SIZE}; pass num_attention_heads (--num_attention_heads) or a "
          "bert_config.json (--bert_config_path)")
    num_attention_heads = hidden_size // BERT_HEAD_SIZE
  try:
    return bert.BertConfig(num_attention_heads=int(num_attention_heads), hidden_act=bert.GELU_TANH, **fields)
  except ValueError as e:
    raise sources.ConversionError(f"{checkpoint.path}: BERT under {bert_prefix!r}: {e}") from e


def bert_config_for(checkpoint: Union[str, sources.TFCheckpointSource],
                    bert_prefix: str,
                    bert_config_path: Optional[str] = None,
                    num_attention_heads: Optional[int] = None) -> bert.BertConfig:
  """The BertConfig of the BERT under bert_prefix: bert_config_path (a Google bert_config.json, whose
  "gelu" is the tanh one) checked against the checkpoint's shapes, else infer_bert_config.

  Raises:
    sources.ConversionError: naming both files and every field that differs (vocab_size, hidden_size,
      num_layers, intermediate_size, type_vocab_size; more positions than the checkpoint holds), or
      when num_attention_heads contradicts the config file.
  """
  checkpoint = open_checkpoint(checkpoint)
  if bert_config_path is None:
    return infer_bert_config(checkpoint, bert_prefix, num_attention_heads)
  fields = _shape_fields(checkpoint, bert_prefix)
  config = sources.config_from_source(bert_config_path)
  differences = [
      f"{field} {getattr(config, field)} (config) vs {fields[field]} (checkpoint)"
      for field in ("vocab_size", "hidden_size", "num_layers", "intermediate_size", "type_vocab_size")
      if getattr(config, field) != fields[field]
  ]
  if config.max_position_embeddings > fields["max_position_embeddings"]:
    differences.append(f"max_position_embeddings {config.max_position_embeddings} (config) > "
                       f"{fields['max_position_embeddings']} positions in the checkpoint")
  if num_attention_heads is not None and num_attention_heads != config.num_attention_heads:
    differences.append(f"num_attention_heads {config.num_attention_heads} (config) vs "
                       f"{num_attention_heads} (argument)")
  if differences:
    raise sources.ConversionError(f"{bert_config_path} does not describe the BERT under {bert_prefix!r} in "
                                  f"{checkpoint.path}: " + "; ".join(differences) +
                                  "; use the config (and vocab) the checkpoint was trained with")
  if config.hidden_act != bert.GELU_TANH:
    raise sources.ConversionError(f"{bert_config_path}: hidden_act {config.hidden_act}, but the released "
                                  "REALM/ORQA BERTs use tanh gelu (\"gelu\" in a Google bert_config.json)")
  return config


def check_vocab(vocab_path: str, config: bert.BertConfig, checkpoint_path: str, variable: str) -> int:
  """Checks a vocab file has as many tokens as the checkpoint's word embeddings have rows.

  Raises:
    sources.ConversionError: naming the vocab file, the checkpoint and its variable, with both counts.
  """
  num_tokens = len(tokenization.load_vocab(vocab_path))
  if num_tokens != config.vocab_size:
    raise sources.ConversionError(f"vocab {vocab_path} has {num_tokens} tokens but {checkpoint_path} "
                                  f"variable {variable} has {config.vocab_size} rows; use the vocab.txt "
                                  "the checkpoint was trained with (the hub module's assets/vocab.txt)")
  return num_tokens


def find_module_vocab(checkpoint_path: str) -> Optional[str]:
  """The vocab of a hub module checkpoint: <module>/assets/vocab.txt for <module>/variables/variables,
  or a vocab.txt beside the checkpoint; None if there is none."""
  directory = os.path.dirname(checkpoint_path)
  for candidate in (os.path.join(directory, VOCAB_NAME), os.path.join(directory, "assets", VOCAB_NAME),
                    os.path.join(os.path.dirname(directory), "assets", VOCAB_NAME)):
    if tf.io.gfile.exists(candidate):
      return candidate
  return None


def sequence_lengths(layout: Layout,
                     retriever_config: Optional[bert.BertConfig],
                     reader_config: Optional[bert.BertConfig] = None,
                     query_seq_len: Optional[int] = None,
                     candidate_seq_len: Optional[int] = None,
                     reader_seq_len: Optional[int] = None) -> Dict[str, int]:
  """The sequence lengths a converted model runs with: {"query_seq_len", "candidate_seq_len"[,
  "reader_seq_len"]} for the retriever layouts (ORIGINAL_SEQUENCE_LENGTHS says which).

  Each is the given value, else the original's cut to the position table of the BERT that reads it
  (query and candidate: the retriever's; reader: the reader's): min(320, 64) = 64 for a 64-position
  reader.

  Raises:
    sources.ConversionError: naming the flag, the position table's variable and size and the checkpoint, for
      a length beyond the table or below 1, or one the layout has no use for.
  """
  originals = ORIGINAL_SEQUENCE_LENGTHS.get(layout.name, {})
  requested = {
      "query_seq_len": query_seq_len,
      "candidate_seq_len": candidate_seq_len,
      "reader_seq_len": reader_seq_len
  }
  unused = [name for name, value in requested.items() if value is not None and name not in originals]
  if unused:
    raise sources.ConversionError(f"{layout.checkpoint_path}: layout {layout.name} has no use for " +
                                  ", ".join(f"{name} (--{name})" for name in unused) +
                                  "; sequence lengths apply to the retriever layouts "
                                  f"({', '.join(ORIGINAL_SEQUENCE_LENGTHS)})")
  lengths = {}
  for name, original in originals.items():
    which, config, prefix = (("reader", reader_config, layout.reader_bert) if name == "reader_seq_len" else
                             ("retriever", retriever_config, layout.retriever_bert))
    positions = config.max_position_embeddings
    value = requested[name]
    if value is None:
      value = min(original, positions)
    elif not 1 <= value <= positions:
      raise sources.ConversionError(
          f"{name} {value} (--{name}) does not fit the {which} BERT: its position table "
          f"{prefix}embeddings/position_embeddings in {layout.checkpoint_path} holds {positions} "
          f"positions; pass --{name} between 1 and {positions}, or omit it for min({original}, "
          f"{positions}) = {min(original, positions)}")
    lengths[name] = int(value)
  return lengths


# ------------------------------------------------------------------------------------------------
# Loading into models.


def _build_embedder(embedder: embedder_lib.RetrieverEmbedder) -> None:
  if not embedder.projection.built:
    dummy = tf.zeros([1, 2], tf.int32)
    embedder((dummy, tf.ones_like(dummy), dummy))


def _build_reader(reader: reader_lib.SpanReader) -> None:
  """Creates the reader's variables layer by layer, as its call would: a call needs reader.seq_len
  positions, which a small BERT may not have."""
  if not reader.span_output.built:
    dummy = tf.zeros([1, 2], tf.int32)
    with tf.name_scope(reader.name):  # The variable names a call gives ("reader/bert/...").
      sequence = reader.encoder(bert.encoder_inputs(dummy, tf.ones_like(dummy), dummy))["sequence_output"]
      hidden = reader.span_projection(sequence)[..., :reader.span_hidden_size]
      reader.span_output(reader.layer_norm(hidden))


def _check_numerics(model_name: str,
                    config: Optional[bert.BertConfig],
                    layer_norm=None,
                    epsilon: Optional[float] = None) -> None:
  """Refuses models whose numerics differ from the released ones (outputs would drift silently)."""
  if config is not None and config.hidden_act != bert.GELU_TANH:
    raise ValueError(f"{model_name}: the released BERTs use tanh gelu; build it with "
                     f"hidden_act={bert.GELU_TANH!r}, not {config.hidden_act!r}")
  if layer_norm is not None and abs(layer_norm.epsilon - epsilon) > epsilon * 1e-3:
    raise ValueError(f"{model_name}: LayerNorm {layer_norm.name!r} has epsilon {layer_norm.epsilon}, "
                     f"the released model {epsilon}; build it with layer_norm_epsilon={epsilon}")


def _load(checkpoint: sources.TFCheckpointSource, layout: Layout, berts: Sequence[Tuple[object, str, object]],
          heads: Sequence[Tuple[str, tf.Variable]], strict: bool,
          model_names: str) -> bert_mapping.ConversionReport:
  """Loads BERT bodies (bert_mapping) and head variables; see the module doc for strictness."""
  values: List[Tuple[tf.Variable, np.ndarray]] = []
  mapped: List[str] = []
  problems: List[str] = []
  unset: List[str] = []
  notes: List[str] = []
  for name, variable in heads:
    model_shape = tuple(variable.shape.as_list())
    if name not in checkpoint.shapes:
      problems.append(f"missing from the checkpoint: {name} (model weight {variable.name} "
                      f"{bert_mapping.shape_str(model_shape)})")
      unset.append(variable.name)
      continue
    value = checkpoint.read(name)
    if tuple(value.shape) != model_shape:
      problems.append(f"shape mismatch: {name}: checkpoint {bert_mapping.shape_str(value.shape)} vs model "
                      f"{variable.name} {bert_mapping.shape_str(model_shape)}")
      unset.append(variable.name)
      continue
    values.append((variable, value.astype(variable.dtype.as_numpy_dtype)))
    if name not in mapped:
      mapped.append(name)
  bert_errors: List[str] = []
  for encoder, prefix, masked_lm in berts:
    try:
      report = bert_mapping.load_bert_weights(encoder,
                                              checkpoint,
                                              masked_lm=masked_lm,
                                              prefix=prefix,
                                              strict=strict)
    except sources.ConversionError as e:
      bert_errors.append(str(e))
      continue
    mapped += [n for n in report.mapped if n not in mapped]
    unset += list(report.unset)
    problems += list(report.problems)
    notes += list(report.notes)
  if strict and (problems or bert_errors):
    raise sources.ConversionError("\n  ".join([
        f"{checkpoint.path}: cannot load layout {layout.name} into {model_names} "
        f"({len(problems) + len(bert_errors)} problems; strict=False loads what fits):"
    ] + problems + bert_errors))
  for variable, value in values:
    variable.assign(value)
  mapped_set, ignored_set = set(mapped), set(layout.ignored)
  unmapped = [n for n in checkpoint.model_names() if n not in mapped_set and n not in ignored_set]
  report = bert_mapping.ConversionReport(source_path=checkpoint.path,
                                         layout=layout.name,
                                         mapped=tuple(mapped),
                                         unmapped=tuple(unmapped),
                                         ignored=layout.ignored,
                                         unset=tuple(unset),
                                         problems=tuple(problems + bert_errors),
                                         notes=tuple(notes),
                                         num_skipped=sum(sources.is_skipped(n) for n in checkpoint.names()))
  return report


def load_knowledge_augmented_encoder(model: kae_lib.KnowledgeAugmentedEncoder,
                                     checkpoint: Union[str, sources.TFCheckpointSource],
                                     strict: bool = True) -> bert_mapping.ConversionReport:
  """Loads a realm_bert checkpoint (bert/..., cls/predictions/...) into model.encoder and
  model.masked_lm (the decoder is tied to the word embeddings, as in the original)."""
  checkpoint = open_checkpoint(checkpoint)
  layout = detect_layout(checkpoint, REALM_BERT)
  _check_numerics(model.name, model.config)
  return _load(checkpoint, layout, [(model.encoder, layout.encoder_bert, model.masked_lm)], [], strict,
               repr(model.name))


def _embedders_of(model) -> List[embedder_lib.RetrieverEmbedder]:
  if isinstance(model, embedder_lib.RetrieverEmbedder):
    return [model]
  towers = [model.doc_embedder]
  if model.query_embedder is not model.doc_embedder:
    towers.append(model.query_embedder)
  return towers


def _retriever_parts(model, layout: Layout):
  berts, heads = [], []
  for embedder in _embedders_of(model):
    _check_numerics(embedder.name, embedder.config, embedder.layer_norm, EMBEDDER_LAYER_NORM_EPSILON)
    _build_embedder(embedder)
    scope = layout.projection_scope
    berts.append((embedder.encoder, layout.retriever_bert, None))
    heads += [(scope + "dense/kernel", embedder.projection.kernel),
              (scope + "dense/bias", embedder.projection.bias),
              (scope + "LayerNorm/gamma", embedder.layer_norm.gamma),
              (scope + "LayerNorm/beta", embedder.layer_norm.beta)]
  return berts, heads


def _reader_parts(reader: reader_lib.SpanReader, layout: Layout):
  _check_numerics(reader.name, None, reader.layer_norm, READER_LAYER_NORM_EPSILON)
  _build_reader(reader)
  scope = layout.span_head_scope
  heads = [(scope + "dense/kernel", reader.span_projection.kernel),
           (scope + "dense/bias", reader.span_projection.bias),
           (scope + "dense_1/kernel", reader.span_output.kernel),
           (scope + "dense_1/bias", reader.span_output.bias),
           (scope + "layer_normalization/gamma", reader.layer_norm.gamma),
           (scope + "layer_normalization/beta", reader.layer_norm.beta)]
  return [(reader.encoder, layout.reader_bert, None)], heads


def load_retriever(model: Union[embedder_lib.Retriever, embedder_lib.RetrieverEmbedder],
                   checkpoint: Union[str, sources.TFCheckpointSource],
                   strict: bool = True) -> bert_mapping.ConversionReport:
  """Loads the released retriever embedder into a RetrieverEmbedder, or into every tower of a Retriever
  (one tower when shared).

  The checkpoint is a realm_embedder one, or an orqa_from_realm one (its retriever; the reader's
  variables are then reported as unmapped). The model must be built with the checkpoint's BERT config,
  projection size and layer_norm_epsilon 1e-12.
  """
  checkpoint = open_checkpoint(checkpoint)
  layout = detect_layout(checkpoint)
  if layout.name not in (REALM_EMBEDDER, ORQA_FROM_REALM):
    raise sources.ConversionError(f"{checkpoint.path} holds no retriever: {layout.describe()}")
  berts, heads = _retriever_parts(model, layout)
  return _load(checkpoint, layout, berts, heads, strict, repr(model.name))


def load_orqa(retriever: embedder_lib.Retriever,
              reader: reader_lib.SpanReader,
              checkpoint: Union[str, sources.TFCheckpointSource],
              strict: bool = True) -> bert_mapping.ConversionReport:
  """Loads an orqa_from_realm checkpoint into a Retriever and a SpanReader (built with the reader's
  span_hidden_size, layer_norm_epsilon 1e-3)."""
  checkpoint = open_checkpoint(checkpoint)
  layout = detect_layout(checkpoint, ORQA_FROM_REALM)
  berts, heads = _retriever_parts(retriever, layout)
  reader_berts, reader_heads = _reader_parts(reader, layout)
  return _load(checkpoint, layout, berts + reader_berts, heads + reader_heads, strict,
               f"{retriever.name!r} and {reader.name!r}")


# ------------------------------------------------------------------------------------------------
# Building the models a checkpoint needs and loading them in one call.


@dataclasses.dataclass
class LoadedModels:
  """The models of a released checkpoint, built with its configuration and loaded.

  Attributes:
    layout: the detected layout.
    report: what was loaded.
    encoder_config / retriever_config / reader_config: BERT configs of the parts present.
    knowledge_augmented_encoder, retriever, reader: the models (None where the layout has none).
    projection_size: D of the retriever; span_hidden_size: the reader's span head width.
    sequence_lengths: the retriever layouts' (see sequence_lengths()); the reader is built with its
      reader_seq_len.
  """
  layout: Layout
  report: bert_mapping.ConversionReport
  encoder_config: Optional[bert.BertConfig] = None
  retriever_config: Optional[bert.BertConfig] = None
  reader_config: Optional[bert.BertConfig] = None
  knowledge_augmented_encoder: Optional[kae_lib.KnowledgeAugmentedEncoder] = None
  retriever: Optional[embedder_lib.Retriever] = None
  reader: Optional[reader_lib.SpanReader] = None
  projection_size: Optional[int] = None
  span_hidden_size: Optional[int] = None
  sequence_lengths: Optional[Dict[str, int]] = None


def _head_width(checkpoint: sources.TFCheckpointSource, name: str, divisor: int = 1) -> int:
  if name not in checkpoint.shapes:
    raise sources.ConversionError(f"{checkpoint.path}: missing {name}")
  return int(checkpoint.shapes[name][-1]) // divisor


def load_released(checkpoint_path: str,
                  layout: str = AUTO,
                  bert_config_path: Optional[str] = None,
                  num_attention_heads: Optional[int] = None,
                  share_embedders: bool = True,
                  reader_seq_len: Optional[int] = None,
                  max_span_width: int = ORQA_MAX_SPAN_WIDTH,
                  strict: bool = True,
                  query_seq_len: Optional[int] = None,
                  candidate_seq_len: Optional[int] = None) -> LoadedModels:
  """Detects the layout, builds realm_tf models with the checkpoint's configuration and loads them.

  Args:
    checkpoint_path: checkpoint prefix, directory, or hub module directory.
    layout: AUTO or the layout the checkpoint must hold (not block_emb: see read_block_emb).
    bert_config_path: a Google bert_config.json for every BERT in it; else inferred from the shapes.
    num_attention_heads: when inferring (default hidden_size / 64).
    share_embedders: one retriever tower (as the release) or two loaded with the same weights.
    reader_seq_len, max_span_width: the SpanReader's span enumeration (not weights; ORQA: 320, 10).
      reader_seq_len defaults to 320, or the BERT's max_position_embeddings when that is smaller.
    strict: see the module doc.
    query_seq_len, candidate_seq_len: checked and recorded in the result's sequence_lengths (with
      reader_seq_len) before anything is built; see sequence_lengths().
  """
  checkpoint = open_checkpoint(checkpoint_path, layout)
  detected = detect_layout(checkpoint, layout)
  if detected.name == BLOCK_EMB:
    raise sources.ConversionError(f"{checkpoint.path} holds block embeddings, not models: use "
                                  "read_block_emb / convert_block_emb")

  def config(prefix):
    return bert_config_for(checkpoint, prefix, bert_config_path, num_attention_heads)

  result = LoadedModels(layout=detected, report=None)  # type: ignore[arg-type]
  if detected.name != REALM_BERT:
    result.retriever_config = config(detected.retriever_bert)
  if detected.name == ORQA_FROM_REALM:
    result.reader_config = config(detected.reader_bert)
  result.sequence_lengths = sequence_lengths(detected, result.retriever_config, result.reader_config,
                                             query_seq_len, candidate_seq_len, reader_seq_len)
  if detected.name == REALM_BERT:
    result.encoder_config = config(detected.encoder_bert)
    result.knowledge_augmented_encoder = kae_lib.KnowledgeAugmentedEncoder(result.encoder_config)
    result.report = load_knowledge_augmented_encoder(result.knowledge_augmented_encoder, checkpoint, strict)
    return result
  result.projection_size = _head_width(checkpoint, detected.projection_scope + "dense/kernel")
  result.retriever = embedder_lib.build_retriever(result.retriever_config, result.projection_size,
                                                  EMBEDDER_LAYER_NORM_EPSILON, 0.0, share_embedders)
  if detected.name == REALM_EMBEDDER:
    result.report = load_retriever(result.retriever, checkpoint, strict)
    return result
  result.span_hidden_size = _head_width(checkpoint, detected.span_head_scope + "dense/kernel", 2)
  result.reader = reader_lib.SpanReader(result.reader_config,
                                        seq_len=result.sequence_lengths["reader_seq_len"],
                                        span_hidden_size=result.span_hidden_size,
                                        max_span_width=max_span_width,
                                        layer_norm_epsilon=READER_LAYER_NORM_EPSILON)
  result.report = load_orqa(result.retriever, result.reader, checkpoint, strict)
  return result


# ------------------------------------------------------------------------------------------------
# Block embeddings (realm_tf.conversion.released_conversion turns them into a MIPS index).


def read_block_emb(checkpoint_path: str) -> Tuple[np.ndarray, Layout]:
  """The block embeddings float32 [num_blocks, D] of an encoded.ckpt (or a module directory holding
  encoded/encoded.ckpt). Row i is the embedding of block i of ORQA's blocks.tfr."""
  checkpoint = open_checkpoint(checkpoint_path, BLOCK_EMB)
  layout = detect_layout(checkpoint, BLOCK_EMB)
  value = checkpoint.read(layout.block_emb)
  if value.ndim != 2:
    raise sources.ConversionError(f"{checkpoint.path}: {layout.block_emb} has shape "
                                  f"{bert_mapping.shape_str(value.shape)}, expected [num_blocks, dim]")
  return np.ascontiguousarray(value, dtype=np.float32), layout
