"""Google's released REALM / ORQA checkpoints loaded into realm_tf's Keras models.

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
embeddings/word_embeddings (bert_conversion.find_bert_prefixes, which also maps the BERT bodies), and a
head is found in the deepest scope ENCLOSING its BERT that holds the head's variables (the projection
`dense/` + `LayerNorm/` of a retriever; `dense/` + `dense_1/` + `layer_normalization/` of a reader). A
BERT with neither but a `cls/predictions/` sibling is a knowledge-augmented encoder. So a re-exported
module one hub level deeper or shallower still converts. Which layout a checkpoint holds is decided from
these roles (detect_layout) and always said; anything else is refused with the BERT scopes and
top-level scopes that were found.

Optimizer slots (adam_m, adam_v, ...) and global_step are skipped. Every other variable is accounted
for in the ConversionReport: mapped (assigned), ignored (the documented unused MLM heads), or unmapped
(reported, never silently dropped); model weights the checkpoint could not fill are listed as unset.
Strict loading (the default) raises ConversionError naming the checkpoint file and every missing or
misshapen variable; after such an error the model may be partly assigned, so discard it.

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
it (sequence_lengths); convert() states them in realm_config.json and conversion.json. An ORQA
conversion plus a block_emb conversion with its blocks are what orqa_trainer.load_converted and
bin/export_saved_model --index_dir turn into the open-QA SavedModel (converted_orqa_configs,
load_converted_index).
"""

import dataclasses
import json
import os
import re
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from realm_tf import io_utils
from realm_tf import tokenization
from realm_tf.modeling import bert
from realm_tf.modeling import bert_conversion
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import knowledge_augmented_encoder as kae_lib
from realm_tf.modeling import orqa as orqa_lib
from realm_tf.modeling import reader as reader_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import index as index_lib

ConversionError = bert_conversion.ConversionError

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
    REALM_EMBEDDER: {"query_seq_len": 96, "candidate_seq_len": 288},
    ORQA_FROM_REALM: {"query_seq_len": 64, "candidate_seq_len": 288, "reader_seq_len": 320},
}
ORQA_MAX_SPAN_WIDTH = 10
EMBEDDER_LAYER_NORM_EPSILON = 1e-12
READER_LAYER_NORM_EPSILON = 1e-3
BERT_HEAD_SIZE = 64
BLOCK_EMB_VARIABLE = "block_emb"

# Output files of convert().
CHECKPOINT_NAME = "ckpt"
BERT_CONFIG_NAME = "bert_config.json"
VOCAB_NAME = "vocab.txt"
CONVERSION_NAME = "conversion.json"
MIPS_DIR = "mips"
BLOCKS_NAME = "blocks.jsonl"

# Name components of optimizer slots and step counters (BERT's AdamWeightDecayOptimizer, tf.train Adam).
_SKIPPED_COMPONENTS = frozenset([
    "adam_m", "adam_v", "Adam", "Adam_1", "AdamWeightDecayOptimizer", "AdamWeightDecayOptimizer_1",
    "global_step", "beta1_power", "beta2_power"])
_WORD_EMBEDDINGS = "embeddings/word_embeddings"
_LAYER = re.compile(r"encoder/layer_(\d+)/")
_MAX_LISTED = 20


def is_skipped(name: str) -> bool:
  """True for optimizer slots and step counters, which are never model weights."""
  return any(part in _SKIPPED_COMPONENTS for part in name.split("/"))


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
                   f"{bert_conversion.masked_lm_prefix(self.encoder_bert)!r}")
    if self.retriever_bert is not None:
      parts.append(f"retriever BERT under {self.retriever_bert!r}, projection and LayerNorm under "
                   f"{self.projection_scope!r}")
    if self.reader_bert is not None:
      parts.append(f"reader BERT under {self.reader_bert!r}, span head under {self.span_head_scope!r}")
    if self.block_emb is not None:
      parts.append(f"variable {self.block_emb!r}")
    if self.ignored:
      parts.append(f"{len(self.ignored)} unused MLM-head variables ignored")
    return (f"{self.checkpoint_path}: layout {self.name} ({_DESCRIPTIONS[self.name]}): "
            + "; ".join(parts))


class _Checkpoint:
  """A TF1 checkpoint's names and shapes (read once) plus its bert_conversion source."""

  def __init__(self, path: str):
    self.source = bert_conversion.TFCheckpointSource(resolve_input(path))
    self.path = self.source.path
    self.shapes: Dict[str, Tuple[int, ...]] = {
        name: tuple(shape) for name, shape in tf.train.list_variables(self.path)}
    if self.source.is_object_based:
      raise ConversionError(f"{self.path} is an object-based TF2 checkpoint (names end in "
                            "/.ATTRIBUTES/VARIABLE_VALUE), not one of Google's released TF1 "
                            "checkpoints; realm_tf checkpoints need no conversion")

  def names(self) -> List[str]:
    return sorted(self.shapes)

  def model_names(self) -> List[str]:
    return [name for name in self.names() if not is_skipped(name)]

  def read(self, name: str) -> np.ndarray:
    return self.source.read(name)


def _open(checkpoint: Union[str, _Checkpoint], layout: str = AUTO) -> _Checkpoint:
  if isinstance(checkpoint, _Checkpoint):
    return checkpoint
  return _Checkpoint(resolve_input(checkpoint, layout))


def resolve_input(path: str, layout: str = AUTO) -> str:
  """A checkpoint prefix from what a user may pass.

  A TF-Hub module or SavedModel directory (the release's cc_news_pretrained/{bert,embedder}) means its
  variables/variables; with layout block_emb, a module directory means its encoded/encoded.ckpt.
  Other directories are resolved by bert_conversion (their latest or only checkpoint).
  """
  if not tf.io.gfile.isdir(path):
    return path
  encoded = os.path.join(path, "encoded", "encoded.ckpt")
  if layout == BLOCK_EMB and tf.io.gfile.exists(encoded + ".index"):
    return encoded
  variables = os.path.join(path, "variables", "variables")
  if tf.io.gfile.exists(variables + ".index"):
    return variables
  return path  # TFCheckpointSource resolves the rest.


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


def detect_layout(checkpoint: Union[str, "_Checkpoint"], expected: str = AUTO) -> Layout:
  """Which released layout a checkpoint holds, from its variable names.

  Args:
    checkpoint: a checkpoint prefix or directory (a hub module directory means its variables).
    expected: AUTO, or a layout the checkpoint must hold (a mismatch is an error naming both).

  Raises:
    ConversionError: naming the file, for an unknown layout (listing the BERT scopes and their roles,
      the top-level scopes and a few names found) or one other than `expected`.
  """
  if expected != AUTO and expected not in LAYOUTS:
    raise ValueError(f"unknown layout {expected!r}; choose {AUTO} or one of {list(LAYOUTS)}")
  checkpoint = _open(checkpoint, expected)
  names = checkpoint.model_names()
  name_set = set(names)
  prefixes = bert_conversion.find_bert_prefixes(checkpoint.source)
  roles: Dict[str, Tuple[str, Optional[str]]] = {}  # BERT prefix -> (role, head scope)
  for prefix in prefixes:
    span_head = _find_head(name_set, prefix, _SPAN_HEAD_VARIABLES)
    projection = _find_head(name_set, prefix, _PROJECTION_VARIABLES)
    if span_head is not None:
      roles[prefix] = ("reader", span_head)
    elif projection is not None:
      roles[prefix] = ("retriever", projection)
    elif bert_conversion.masked_lm_prefix(prefix) + "output_bias" in name_set:
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
    layout = Layout(ORQA_FROM_REALM, path, retriever_bert=retriever,
                    projection_scope=roles[retriever][1], reader_bert=reader,
                    span_head_scope=roles[reader][1],
                    ignored=ignored_under(retriever) + ignored_under(reader))
  elif counts == {"retriever": 1} and not block_embs:
    retriever = by_role["retriever"][0]
    layout = Layout(REALM_EMBEDDER, path, retriever_bert=retriever,
                    projection_scope=roles[retriever][1], ignored=ignored_under(retriever))
  elif counts == {"masked_lm": 1} and not block_embs:
    layout = Layout(REALM_BERT, path, encoder_bert=by_role["masked_lm"][0])
  if layout is None:
    found = "; ".join(f"{prefix!r} ({role})" for prefix, (role, _) in sorted(roles.items())) or "none"
    raise ConversionError(
        f"{path}: not a released REALM/ORQA layout. BERT scopes found (a scope holding "
        f"{_WORD_EMBEDDINGS}): {found}; block_emb variables: {block_embs or 'none'}; top-level scopes: "
        f"{_top_level_summary(names)}; e.g. {', '.join(names[:8]) or 'no variables'}. Known layouts: "
        + "; ".join(f"{n}: {d}" for n, d in _DESCRIPTIONS.items())
        + " (see realm_tf/modeling/released_checkpoints.py)")
  if expected not in (AUTO, layout.name):
    raise ConversionError(f"{path}: layout {expected} was asked for, but the checkpoint holds "
                          f"{layout.describe()}; pass layout={AUTO} (--layout={AUTO}) or the matching "
                          "checkpoint")
  return layout


# ------------------------------------------------------------------------------------------------
# BERT configuration.


def _shape_fields(checkpoint: "_Checkpoint", bert_prefix: str) -> Dict[str, int]:
  """Every BertConfig field the shapes of the BERT under bert_prefix determine."""
  shapes = checkpoint.shapes
  needed = [bert_prefix + n for n in (_WORD_EMBEDDINGS, "embeddings/position_embeddings",
                                      "embeddings/token_type_embeddings",
                                      "encoder/layer_0/intermediate/dense/kernel")]
  missing = [n for n in needed if n not in shapes]
  if missing:
    raise ConversionError(f"{checkpoint.path}: cannot infer the BERT config under {bert_prefix!r}: "
                          f"missing {missing}")
  layers = {int(m.group(1)) for m in (_LAYER.match(n[len(bert_prefix):]) for n in shapes
                                      if n.startswith(bert_prefix)) if m}
  if layers != set(range(len(layers))):
    raise ConversionError(f"{checkpoint.path}: the BERT under {bert_prefix!r} has layers "
                          f"{sorted(layers)}, not 0..n-1; the checkpoint is incomplete")
  return {"vocab_size": int(shapes[needed[0]][0]), "hidden_size": int(shapes[needed[0]][1]),
          "num_layers": len(layers), "intermediate_size": int(shapes[needed[3]][1]),
          "max_position_embeddings": int(shapes[needed[1]][0]),
          "type_vocab_size": int(shapes[needed[2]][0])}


def infer_bert_config(checkpoint: Union[str, "_Checkpoint"], bert_prefix: str,
                      num_attention_heads: Optional[int] = None) -> bert.BertConfig:
  """The BertConfig of the BERT under bert_prefix, from the checkpoint's shapes (see the module doc).

  Raises:
    ConversionError: naming the file, when a variable the shapes come from is missing, or when the
      number of heads cannot be inferred (pass num_attention_heads).
  """
  checkpoint = _open(checkpoint)
  fields = _shape_fields(checkpoint, bert_prefix)
  hidden_size = fields["hidden_size"]
  if num_attention_heads is None:
    if hidden_size % BERT_HEAD_SIZE:
      raise ConversionError(
          f"{checkpoint.path}: the number of attention heads is not in the checkpoint and hidden_size "
          f"{hidden_size} ({bert_prefix}{_WORD_EMBEDDINGS}) is not a multiple of BERT's head size "
          f"{BERT_HEAD_SIZE}; pass num_attention_heads (--num_attention_heads) or a bert_config.json "
          "(--bert_config_path)")
    num_attention_heads = hidden_size // BERT_HEAD_SIZE
  try:
    return bert.BertConfig(num_attention_heads=int(num_attention_heads), hidden_act=bert.GELU_TANH,
                           **fields)
  except ValueError as e:
    raise ConversionError(f"{checkpoint.path}: BERT under {bert_prefix!r}: {e}") from e


def bert_config_for(checkpoint: Union[str, "_Checkpoint"], bert_prefix: str,
                    bert_config_path: Optional[str] = None,
                    num_attention_heads: Optional[int] = None) -> bert.BertConfig:
  """The BertConfig of the BERT under bert_prefix: bert_config_path (a Google bert_config.json, whose
  "gelu" is the tanh one) checked against the checkpoint's shapes, else infer_bert_config.

  Raises:
    ConversionError: naming both files and every field that differs (vocab_size, hidden_size,
      num_layers, intermediate_size, type_vocab_size; more positions than the checkpoint holds), or
      when num_attention_heads contradicts the config file.
  """
  checkpoint = _open(checkpoint)
  if bert_config_path is None:
    return infer_bert_config(checkpoint, bert_prefix, num_attention_heads)
  fields = _shape_fields(checkpoint, bert_prefix)
  config = bert_conversion.config_from_source(bert_config_path)
  differences = [f"{field} {getattr(config, field)} (config) vs {fields[field]} (checkpoint)"
                 for field in ("vocab_size", "hidden_size", "num_layers", "intermediate_size",
                               "type_vocab_size") if getattr(config, field) != fields[field]]
  if config.max_position_embeddings > fields["max_position_embeddings"]:
    differences.append(f"max_position_embeddings {config.max_position_embeddings} (config) > "
                       f"{fields['max_position_embeddings']} positions in the checkpoint")
  if num_attention_heads is not None and num_attention_heads != config.num_attention_heads:
    differences.append(f"num_attention_heads {config.num_attention_heads} (config) vs "
                       f"{num_attention_heads} (argument)")
  if differences:
    raise ConversionError(f"{bert_config_path} does not describe the BERT under {bert_prefix!r} in "
                          f"{checkpoint.path}: " + "; ".join(differences)
                          + "; use the config (and vocab) the checkpoint was trained with")
  if config.hidden_act != bert.GELU_TANH:
    raise ConversionError(f"{bert_config_path}: hidden_act {config.hidden_act}, but the released "
                          "REALM/ORQA BERTs use tanh gelu (\"gelu\" in a Google bert_config.json)")
  return config


def check_vocab(vocab_path: str, config: bert.BertConfig, checkpoint_path: str,
                variable: str) -> int:
  """Checks a vocab file has as many tokens as the checkpoint's word embeddings have rows.

  Raises:
    ConversionError: naming the vocab file, the checkpoint and its variable, with both counts.
  """
  num_tokens = len(tokenization.load_vocab(vocab_path))
  if num_tokens != config.vocab_size:
    raise ConversionError(f"vocab {vocab_path} has {num_tokens} tokens but {checkpoint_path} variable "
                          f"{variable} has {config.vocab_size} rows; use the vocab.txt the checkpoint "
                          "was trained with (the hub module's assets/vocab.txt)")
  return num_tokens


def find_module_vocab(checkpoint_path: str) -> Optional[str]:
  """The vocab of a hub module checkpoint: <module>/assets/vocab.txt for <module>/variables/variables,
  or a vocab.txt beside the checkpoint; None if there is none."""
  directory = os.path.dirname(checkpoint_path)
  for candidate in (os.path.join(directory, VOCAB_NAME),
                    os.path.join(directory, "assets", VOCAB_NAME),
                    os.path.join(os.path.dirname(directory), "assets", VOCAB_NAME)):
    if tf.io.gfile.exists(candidate):
      return candidate
  return None


def sequence_lengths(layout: Layout, retriever_config: Optional[bert.BertConfig],
                     reader_config: Optional[bert.BertConfig] = None,
                     query_seq_len: Optional[int] = None, candidate_seq_len: Optional[int] = None,
                     reader_seq_len: Optional[int] = None) -> Dict[str, int]:
  """The sequence lengths a converted model runs with: {"query_seq_len", "candidate_seq_len"[,
  "reader_seq_len"]} for the retriever layouts (ORIGINAL_SEQUENCE_LENGTHS says which).

  Each is the given value, else the original's cut to the position table of the BERT that reads it
  (query and candidate: the retriever's; reader: the reader's): min(320, 64) = 64 for a 64-position
  reader.

  Raises:
    ConversionError: naming the flag, the position table's variable and size and the checkpoint, for
      a length beyond the table or below 1, or one the layout has no use for.
  """
  originals = ORIGINAL_SEQUENCE_LENGTHS.get(layout.name, {})
  requested = {"query_seq_len": query_seq_len, "candidate_seq_len": candidate_seq_len,
               "reader_seq_len": reader_seq_len}
  unused = [name for name, value in requested.items() if value is not None and name not in originals]
  if unused:
    raise ConversionError(f"{layout.checkpoint_path}: layout {layout.name} has no use for "
                          + ", ".join(f"{name} (--{name})" for name in unused)
                          + "; sequence lengths apply to the retriever layouts "
                          f"({', '.join(ORIGINAL_SEQUENCE_LENGTHS)})")
  lengths = {}
  for name, original in originals.items():
    which, config, prefix = (("reader", reader_config, layout.reader_bert) if name == "reader_seq_len"
                             else ("retriever", retriever_config, layout.retriever_bert))
    positions = config.max_position_embeddings
    value = requested[name]
    if value is None:
      value = min(original, positions)
    elif not 1 <= value <= positions:
      raise ConversionError(
          f"{name} {value} (--{name}) does not fit the {which} BERT: its position table "
          f"{prefix}embeddings/position_embeddings in {layout.checkpoint_path} holds {positions} "
          f"positions; pass --{name} between 1 and {positions}, or omit it for min({original}, "
          f"{positions}) = {min(original, positions)}")
    lengths[name] = int(value)
  return lengths


# ------------------------------------------------------------------------------------------------
# Loading into models.


@dataclasses.dataclass(frozen=True)
class ConversionReport:
  """What loading a released checkpoint did.

  Attributes:
    checkpoint_path: the checkpoint prefix.
    layout: its layout (one of LAYOUTS).
    mapped: checkpoint variables assigned to model weights.
    unmapped: checkpoint variables neither assigned nor documented as ignored (optimizer slots and
      global_step excluded).
    ignored: the documented unused variables (MLM heads of the retriever / reader hub modules).
    unset: model weights left at their initial values (only non-empty when strict=False).
    problems: why weights were left unset (only non-empty when strict=False).
    notes: adaptations made (e.g. a position table cut to the model's length).
    num_skipped: optimizer slots and step counters skipped.
  """
  checkpoint_path: str
  layout: str
  mapped: Tuple[str, ...]
  unmapped: Tuple[str, ...]
  ignored: Tuple[str, ...]
  unset: Tuple[str, ...]
  problems: Tuple[str, ...] = ()
  notes: Tuple[str, ...] = ()
  num_skipped: int = 0

  def summary(self, list_mapped: bool = False) -> str:
    """Counts, then every unmapped, unset and ignored name (and mapped names with list_mapped)."""
    lines = [f"{self.checkpoint_path} ({self.layout}): {len(self.mapped)} variables mapped, "
             f"{len(self.unmapped)} unmapped, {len(self.ignored)} ignored (unused MLM heads), "
             f"{len(self.unset)} model weights unset, {self.num_skipped} optimizer/step variables "
             "skipped"]
    lines += [f"  note: {note}" for note in self.notes]
    lines += [f"  problem: {problem}" for problem in self.problems]
    lines += [f"  unmapped: {name}" for name in self.unmapped]
    lines += [f"  unset: {name}" for name in self.unset]
    lines += [f"  ignored: {name}" for name in self.ignored]
    if list_mapped:
      lines += [f"  mapped: {name}" for name in self.mapped]
    return "\n".join(lines)

  def to_dict(self):
    return dataclasses.asdict(self)


def _shape_str(shape) -> str:
  return "[" + ", ".join(str(int(d)) for d in shape) + "]"


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
      sequence = reader.encoder(bert.encoder_inputs(dummy, tf.ones_like(dummy), dummy))[
          "sequence_output"]
      hidden = reader.span_projection(sequence)[..., :reader.span_hidden_size]
      reader.span_output(reader.layer_norm(hidden))


def _check_numerics(model_name: str, config: Optional[bert.BertConfig], layer_norm=None,
                    epsilon: Optional[float] = None) -> None:
  """Refuses models whose numerics differ from the released ones (outputs would drift silently)."""
  if config is not None and config.hidden_act != bert.GELU_TANH:
    raise ValueError(f"{model_name}: the released BERTs use tanh gelu; build it with "
                     f"hidden_act={bert.GELU_TANH!r}, not {config.hidden_act!r}")
  if layer_norm is not None and abs(layer_norm.epsilon - epsilon) > epsilon * 1e-3:
    raise ValueError(f"{model_name}: LayerNorm {layer_norm.name!r} has epsilon {layer_norm.epsilon}, "
                     f"the released model {epsilon}; build it with layer_norm_epsilon={epsilon}")


def _load(checkpoint: _Checkpoint, layout: Layout,
          berts: Sequence[Tuple[object, str, object]],
          heads: Sequence[Tuple[str, tf.Variable]], strict: bool,
          model_names: str) -> ConversionReport:
  """Loads BERT bodies (bert_conversion) and head variables; see the module doc for strictness."""
  values: List[Tuple[tf.Variable, np.ndarray]] = []
  mapped: List[str] = []
  problems: List[str] = []
  unset: List[str] = []
  notes: List[str] = []
  for name, variable in heads:
    model_shape = tuple(variable.shape.as_list())
    if name not in checkpoint.shapes:
      problems.append(f"missing from the checkpoint: {name} (model weight {variable.name} "
                      f"{_shape_str(model_shape)})")
      unset.append(variable.name)
      continue
    value = checkpoint.read(name)
    if tuple(value.shape) != model_shape:
      problems.append(f"shape mismatch: {name}: checkpoint {_shape_str(value.shape)} vs model "
                      f"{variable.name} {_shape_str(model_shape)}")
      unset.append(variable.name)
      continue
    values.append((variable, value.astype(variable.dtype.as_numpy_dtype)))
    if name not in mapped:
      mapped.append(name)
  bert_errors: List[str] = []
  for encoder, prefix, masked_lm in berts:
    try:
      report = bert_conversion.load_bert_weights(encoder, checkpoint.source, masked_lm=masked_lm,
                                                 prefix=prefix, strict=strict)
    except ConversionError as e:
      bert_errors.append(str(e))
      continue
    mapped += [n for n in report.used if n not in mapped]
    unset += list(report.unset)
    problems += list(report.problems)
    notes += list(report.notes)
  if strict and (problems or bert_errors):
    raise ConversionError("\n  ".join(
        [f"{checkpoint.path}: cannot load layout {layout.name} into {model_names} "
         f"({len(problems) + len(bert_errors)} problems; strict=False loads what fits):"]
        + problems + bert_errors))
  for variable, value in values:
    variable.assign(value)
  mapped_set, ignored_set = set(mapped), set(layout.ignored)
  unmapped = [n for n in checkpoint.model_names() if n not in mapped_set and n not in ignored_set]
  report = ConversionReport(
      checkpoint_path=checkpoint.path, layout=layout.name, mapped=tuple(mapped),
      unmapped=tuple(unmapped), ignored=layout.ignored, unset=tuple(unset),
      problems=tuple(problems + bert_errors), notes=tuple(notes),
      num_skipped=sum(is_skipped(n) for n in checkpoint.names()))
  return report


def load_knowledge_augmented_encoder(model: kae_lib.KnowledgeAugmentedEncoder,
                                     checkpoint: Union[str, _Checkpoint],
                                     strict: bool = True) -> ConversionReport:
  """Loads a realm_bert checkpoint (bert/..., cls/predictions/...) into model.encoder and
  model.masked_lm (the decoder is tied to the word embeddings, as in the original)."""
  checkpoint = _open(checkpoint)
  layout = detect_layout(checkpoint, REALM_BERT)
  _check_numerics(model.name, model.config)
  return _load(checkpoint, layout, [(model.encoder, layout.encoder_bert, model.masked_lm)], [],
               strict, repr(model.name))


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
                   checkpoint: Union[str, _Checkpoint], strict: bool = True) -> ConversionReport:
  """Loads the released retriever embedder into a RetrieverEmbedder, or into every tower of a Retriever
  (one tower when shared).

  The checkpoint is a realm_embedder one, or an orqa_from_realm one (its retriever; the reader's
  variables are then reported as unmapped). The model must be built with the checkpoint's BERT config,
  projection size and layer_norm_epsilon 1e-12.
  """
  checkpoint = _open(checkpoint)
  layout = detect_layout(checkpoint)
  if layout.name not in (REALM_EMBEDDER, ORQA_FROM_REALM):
    raise ConversionError(f"{checkpoint.path} holds no retriever: {layout.describe()}")
  berts, heads = _retriever_parts(model, layout)
  return _load(checkpoint, layout, berts, heads, strict, repr(model.name))


def load_orqa(retriever: embedder_lib.Retriever, reader: reader_lib.SpanReader,
              checkpoint: Union[str, _Checkpoint], strict: bool = True) -> ConversionReport:
  """Loads an orqa_from_realm checkpoint into a Retriever and a SpanReader (built with the reader's
  span_hidden_size, layer_norm_epsilon 1e-3)."""
  checkpoint = _open(checkpoint)
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
  report: ConversionReport
  encoder_config: Optional[bert.BertConfig] = None
  retriever_config: Optional[bert.BertConfig] = None
  reader_config: Optional[bert.BertConfig] = None
  knowledge_augmented_encoder: Optional[kae_lib.KnowledgeAugmentedEncoder] = None
  retriever: Optional[embedder_lib.Retriever] = None
  reader: Optional[reader_lib.SpanReader] = None
  projection_size: Optional[int] = None
  span_hidden_size: Optional[int] = None
  sequence_lengths: Optional[Dict[str, int]] = None


def _head_width(checkpoint: _Checkpoint, name: str, divisor: int = 1) -> int:
  if name not in checkpoint.shapes:
    raise ConversionError(f"{checkpoint.path}: missing {name}")
  return int(checkpoint.shapes[name][-1]) // divisor


def load_released(checkpoint_path: str, layout: str = AUTO, bert_config_path: Optional[str] = None,
                  num_attention_heads: Optional[int] = None, share_embedders: bool = True,
                  reader_seq_len: Optional[int] = None, max_span_width: int = ORQA_MAX_SPAN_WIDTH,
                  strict: bool = True, query_seq_len: Optional[int] = None,
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
  checkpoint = _Checkpoint(resolve_input(checkpoint_path, layout))
  detected = detect_layout(checkpoint, layout)
  if detected.name == BLOCK_EMB:
    raise ConversionError(f"{checkpoint.path} holds block embeddings, not models: use "
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
    result.report = load_knowledge_augmented_encoder(result.knowledge_augmented_encoder, checkpoint,
                                                     strict)
    return result
  result.projection_size = _head_width(checkpoint, detected.projection_scope + "dense/kernel")
  result.retriever = embedder_lib.build_retriever(
      result.retriever_config, result.projection_size, EMBEDDER_LAYER_NORM_EPSILON, 0.0,
      share_embedders)
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
# Block embeddings -> MIPS index.


def read_block_emb(checkpoint_path: str) -> Tuple[np.ndarray, Layout]:
  """The block embeddings float32 [num_blocks, D] of an encoded.ckpt (or a module directory holding
  encoded/encoded.ckpt). Row i is the embedding of block i of ORQA's blocks.tfr."""
  checkpoint = _Checkpoint(resolve_input(checkpoint_path, BLOCK_EMB))
  layout = detect_layout(checkpoint, BLOCK_EMB)
  value = checkpoint.read(layout.block_emb)
  if value.ndim != 2:
    raise ConversionError(f"{checkpoint.path}: {layout.block_emb} has shape {_shape_str(value.shape)}, "
                          "expected [num_blocks, dim]")
  return np.ascontiguousarray(value, dtype=np.float32), layout


def read_tfrecord_strings(path: str) -> Iterator[bytes]:
  """The records of an uncompressed TFRecord file of raw strings (ORQA's blocks.tfr, titles.tfr)."""
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(f"{path} does not exist; pass ORQA's blocks.tfr (one raw string per record)")
  for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
    yield record


def _decode(value: bytes, path: str, row: int) -> str:
  try:
    return value.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ConversionError(f"{path}: record {row} is not UTF-8 ({e}); pass ORQA's blocks.tfr / "
                          "titles.tfr (raw UTF-8 strings, uncompressed)") from e


def _block_records(embeddings_path: str, num_rows: int, blocks_path: str,
                   titles_path: Optional[str]) -> Iterator[Dict]:
  """{"row", "text"[, "title"]} for each block, checking both files have exactly num_rows records."""
  titles = read_tfrecord_strings(titles_path) if titles_path else None
  row = -1
  for row, text in enumerate(read_tfrecord_strings(blocks_path)):
    if row >= num_rows:
      raise ConversionError(f"{blocks_path} has more records than the {num_rows} rows of "
                            f"{embeddings_path}; the embeddings and blocks must come from one corpus")
    record = {"row": row, "text": _decode(text, blocks_path, row)}
    if titles is not None:
      title = next(titles, None)
      if title is None:
        raise ConversionError(f"{titles_path} has {row} records, {blocks_path} more; the files must "
                              "be aligned")
      record["title"] = _decode(title, titles_path, row)
    yield record
  if row + 1 != num_rows:
    raise ConversionError(f"{blocks_path} has {row + 1} records but {embeddings_path} has {num_rows} "
                          "rows; the embeddings and blocks must come from one corpus")
  if titles is not None and next(titles, None) is not None:
    raise ConversionError(f"{titles_path} has more records than {blocks_path}; the files must be "
                          "aligned")


def convert_block_emb(checkpoint_path: str, output_dir: str, blocks_path: Optional[str] = None,
                      titles_path: Optional[str] = None, implementation: str = "scann",
                      **index_options) -> Tuple[index_lib.MipsIndex, Layout, Dict[str, str]]:
  """Builds and saves the MIPS index of a released block_emb, and the block texts beside it.

  Writes output_dir/mips/ (realm_tf.retrieval.index; doc ids are row numbers, so search returns block
  numbers) and, with blocks_path, output_dir/blocks.jsonl: line i is {"row": i, "text": record i of
  blocks_path[, "title": record i of titles_path]}. Row i of the index <-> block i <-> line i; the
  record counts must equal the number of rows (ConversionError naming both files otherwise).

  Returns (the index, the checkpoint's Layout, {"index": path[, "blocks": path]}).
  """
  if titles_path and not blocks_path:
    raise ValueError("titles_path needs blocks_path (titles are stored beside the block texts)")
  embeddings, layout = read_block_emb(checkpoint_path)
  outputs = {}
  if blocks_path:
    outputs["blocks"] = os.path.join(output_dir, BLOCKS_NAME)
    tf.io.gfile.makedirs(output_dir)
    io_utils.write_jsonl_atomic(outputs["blocks"], _block_records(
        layout.checkpoint_path, embeddings.shape[0], blocks_path, titles_path))
  mips = index_lib.build_index(embeddings, implementation=implementation, **index_options)
  outputs["index"] = os.path.join(output_dir, MIPS_DIR)
  mips.save(outputs["index"], extra={"source": layout.checkpoint_path, "variable": layout.block_emb,
                                     "blocks_path": blocks_path, "titles_path": titles_path})
  return mips, layout, outputs


def load_block_texts(path: str) -> List[Dict]:
  """The records of a blocks.jsonl written by convert_block_emb, in row order."""
  with tf.io.gfile.GFile(path) as f:
    return [json.loads(line) for line in f]


# ------------------------------------------------------------------------------------------------
# Conversion into realm_tf checkpoints (bin/convert_checkpoint).


@dataclasses.dataclass(frozen=True)
class ConversionResult:
  """What convert() wrote: the layout, the report (None for block_emb), the output paths and the
  sequence lengths the converted model runs with (empty when it has none: realm_bert, block_emb)."""
  layout: Layout
  report: Optional[ConversionReport]
  outputs: Dict[str, str]
  sequence_lengths: Dict[str, int] = dataclasses.field(default_factory=dict)

  def summary(self, list_mapped: bool = True) -> str:
    lines = [self.layout.describe()]
    if self.report is not None:
      lines.append(self.report.summary(list_mapped))
    if self.sequence_lengths:
      lines.append("sequence lengths: " + ", ".join(
          f"{name} {value}" for name, value in self.sequence_lengths.items())
                   + " (the originals' cut to the BERTs' position tables unless given as flags)")
    lines += [f"wrote {kind}: {path}" for kind, path in sorted(self.outputs.items())]
    return "\n".join(lines)


def google_bert_config_dict(config: bert.BertConfig) -> Dict:
  """A Google bert_config.json for config ("gelu" there is BERT's tanh approximation)."""
  if config.hidden_act != bert.GELU_TANH:
    raise ValueError(f"only tanh gelu has a Google bert_config.json name, got {config.hidden_act}")
  return {"vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
          "num_hidden_layers": config.num_layers, "num_attention_heads": config.num_attention_heads,
          "intermediate_size": config.intermediate_size, "hidden_act": "gelu",
          "max_position_embeddings": config.max_position_embeddings,
          "type_vocab_size": config.type_vocab_size,
          "hidden_dropout_prob": config.hidden_dropout_prob,
          "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
          "initializer_range": config.initializer_range}


def _output_path(output_dir: str, name: str) -> str:
  path = os.path.join(output_dir, name)
  return path if "://" in path else os.path.abspath(path)


def _save_checkpoint(output_dir: str, **objects) -> str:
  """tf.train.Checkpoint(**objects) as output_dir/ckpt-0 with a `checkpoint` file, so the directory
  can be passed wherever a checkpoint directory is accepted."""
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(**objects), output_dir, max_to_keep=1,
                                       checkpoint_name=CHECKPOINT_NAME)
  return manager.save(checkpoint_number=0)


def convert(input_checkpoint: str, output_dir: str, layout: str = AUTO,
            bert_config_path: Optional[str] = None, vocab_path: Optional[str] = None,
            num_attention_heads: Optional[int] = None, blocks_path: Optional[str] = None,
            titles_path: Optional[str] = None, index_implementation: str = "scann",
            query_seq_len: Optional[int] = None, candidate_seq_len: Optional[int] = None,
            reader_seq_len: Optional[int] = None) -> ConversionResult:
  """Converts a released checkpoint into realm_tf's formats under output_dir (a new or empty one).

  Outputs by layout:
    realm_bert: ckpt-0 = tf.train.Checkpoint(encoder=, masked_lm=) (Model Garden's
      BertPretrainerV2.checkpoint_items, which bert_conversion.load_bert_weights restores: pass
      output_dir as bin/train_realm --init_reader_checkpoint), bert_config.json, vocab.txt.
    realm_embedder: ckpt-0 = tf.train.Checkpoint(retriever=Retriever) (the `retriever/` layout of
      checkpoints.restore_retriever: pass output_dir as --init_retriever_checkpoint), realm_config.json
      (that BERT for both BERTs, projection_size, embedder_layer_norm_epsilon 1e-12, vocab_path,
      query_seq_len and candidate_seq_len: see sequence_lengths()), bert_config.json, vocab.txt.
    orqa_from_realm: ckpt-0 = tf.train.Checkpoint(retriever=, reader=), realm_config.json (retriever and
      reader BERTs), bert_config.json (the reader's), vocab.txt; conversion.json records
      span_hidden_size and the span reader's OrqaConfig ("orqa_config": reader_seq_len,
      span_hidden_size, max_span_width 10, LayerNorm epsilon 1e-3, the original's beams), which
      converted_orqa_configs() reads back.
    block_emb: mips/ (a saved MIPS index) and, with blocks_path, blocks.jsonl.
  Every layout also writes conversion.json (layout, source, report). The vocab (vocab_path, else the
  hub module's assets/vocab.txt) is checked against the checkpoint and copied; the retriever layouts
  need one (realm_config.json names it).
  """
  if tf.io.gfile.exists(output_dir) and tf.io.gfile.listdir(output_dir):
    raise FileExistsError(f"{output_dir} is not empty; converted checkpoints are written into a new "
                          "directory")
  resolved = resolve_input(input_checkpoint, layout)
  if layout == BLOCK_EMB or (layout == AUTO and detect_layout(resolved).name == BLOCK_EMB):
    if (query_seq_len, candidate_seq_len, reader_seq_len) != (None, None, None):
      raise ValueError("query_seq_len / candidate_seq_len / reader_seq_len do not apply to layout "
                       "block_emb (its embeddings are computed already)")
    mips, detected, outputs = convert_block_emb(resolved, output_dir, blocks_path, titles_path,
                                                index_implementation)
    info = {"layout": BLOCK_EMB, "source": detected.checkpoint_path, "variable": detected.block_emb,
            "num_blocks": mips.num_docs, "dim": mips.dim, "outputs": outputs}
    io_utils.write_json_atomic(os.path.join(output_dir, CONVERSION_NAME), info)
    return ConversionResult(detected, None, dict(outputs, conversion=os.path.join(
        output_dir, CONVERSION_NAME)))
  if blocks_path or titles_path:
    raise ValueError("blocks_path / titles_path only apply to layout block_emb")

  loaded = load_released(resolved, layout, bert_config_path, num_attention_heads,
                         reader_seq_len=reader_seq_len, query_seq_len=query_seq_len,
                         candidate_seq_len=candidate_seq_len)
  detected = loaded.layout
  configs = [(c, prefix) for c, prefix in ((loaded.encoder_config, detected.encoder_bert),
                                             (loaded.retriever_config, detected.retriever_bert),
                                             (loaded.reader_config, detected.reader_bert)) if c]
  vocab_path = vocab_path or find_module_vocab(detected.checkpoint_path)
  if vocab_path is None and detected.name != REALM_BERT:
    raise ConversionError(f"{detected.checkpoint_path}: no vocab.txt beside the checkpoint; pass "
                          "vocab_path (--vocab_path): realm_config.json names the vocab")
  if vocab_path is not None:
    for c, prefix in configs:
      check_vocab(vocab_path, c, detected.checkpoint_path, prefix + _WORD_EMBEDDINGS)

  tf.io.gfile.makedirs(output_dir)
  outputs = {}
  if vocab_path is not None:
    outputs["vocab"] = _output_path(output_dir, VOCAB_NAME)
    io_utils.copy_atomic(vocab_path, outputs["vocab"])
  main_config = loaded.reader_config or loaded.encoder_config or loaded.retriever_config
  outputs["bert_config"] = _output_path(output_dir, BERT_CONFIG_NAME)
  io_utils.write_json_atomic(outputs["bert_config"], google_bert_config_dict(main_config))
  if detected.name == REALM_BERT:
    kae = loaded.knowledge_augmented_encoder
    outputs["checkpoint"] = _save_checkpoint(output_dir, encoder=kae.encoder, masked_lm=kae.masked_lm)
  else:
    objects = {"retriever": loaded.retriever}
    if loaded.reader is not None:
      objects["reader"] = loaded.reader
    outputs["checkpoint"] = _save_checkpoint(output_dir, **objects)
    config = realm_config_lib.RealmConfig(
        retriever_bert=loaded.retriever_config,
        reader_bert=loaded.reader_config or loaded.retriever_config,
        vocab_path=outputs["vocab"], projection_size=loaded.projection_size,
        embedder_layer_norm_epsilon=EMBEDDER_LAYER_NORM_EPSILON, embedder_dropout_rate=0.0,
        share_embedders=True, query_seq_len=loaded.sequence_lengths["query_seq_len"],
        candidate_seq_len=loaded.sequence_lengths["candidate_seq_len"])
    outputs["realm_config"] = config.save(output_dir)
  info = {"layout": detected.name, "source": detected.checkpoint_path,
          "description": detected.describe(), "projection_size": loaded.projection_size,
          "span_hidden_size": loaded.span_hidden_size,
          "reader_layer_norm_epsilon": READER_LAYER_NORM_EPSILON if loaded.reader else None,
          "sequence_lengths": loaded.sequence_lengths,
          "outputs": dict(outputs), "report": loaded.report.to_dict()}
  if loaded.reader is not None:
    info["orqa_config"] = orqa_lib.OrqaConfig(
        reader_seq_len=loaded.sequence_lengths["reader_seq_len"],
        span_hidden_size=loaded.span_hidden_size, max_span_width=ORQA_MAX_SPAN_WIDTH,
        reader_layer_norm_epsilon=READER_LAYER_NORM_EPSILON).to_dict()
  outputs["conversion"] = _output_path(output_dir, CONVERSION_NAME)
  io_utils.write_json_atomic(outputs["conversion"], info)
  return ConversionResult(detected, loaded.report, outputs, loaded.sequence_lengths)


# ------------------------------------------------------------------------------------------------
# Reading converted outputs back (the exporters).


def read_conversion(output_dir: str) -> Optional[Dict]:
  """The conversion.json that convert() wrote into output_dir, or None when there is none (a directory
  that bin/convert_checkpoint did not write)."""
  path = os.path.join(output_dir, CONVERSION_NAME)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)


def converted_orqa_configs(model_dir: str
                           ) -> Tuple[realm_config_lib.RealmConfig, orqa_lib.OrqaConfig]:
  """The RealmConfig (realm_config.json) and the span reader's OrqaConfig (conversion.json) of a
  converted orqa_from_realm checkpoint, with every sequence length checked against its BERT's position
  table (a hand-edited or older config would otherwise fail deep inside the model with a reshape error).

  Raises:
    ValueError: naming the file, for another layout, a conversion.json without orqa_config (written
      before it was recorded), or a length beyond a position table.
  """
  info = read_conversion(model_dir)
  path = os.path.join(model_dir, CONVERSION_NAME)
  if info is None or info.get("layout") != ORQA_FROM_REALM:
    found = "no such file" if info is None else f"layout {info.get('layout')}"
    raise ValueError(f"{model_dir} is not a converted ORQA checkpoint ({path}: {found}); convert "
                     "orqa_{nq,wq}_model_from_realm with bin/convert_checkpoint into it")
  if "orqa_config" not in info:
    raise ValueError(f"{path} records no orqa_config (the reader's sequence length): it was written by "
                     "an older bin/convert_checkpoint; convert the checkpoint again into a new "
                     "--output_dir")
  config = realm_config_lib.RealmConfig.load(model_dir)
  try:
    orqa = orqa_lib.OrqaConfig.from_dict(info["orqa_config"])
  except (TypeError, ValueError) as e:
    raise ValueError(f"{path}: orqa_config is not an ORQA configuration ({e})") from e
  for name, value, bert_config, which, source in (
      ("query_seq_len", config.query_seq_len, config.retriever_bert, "retriever",
       realm_config_lib.CONFIG_NAME),
      ("candidate_seq_len", config.candidate_seq_len, config.retriever_bert, "retriever",
       realm_config_lib.CONFIG_NAME),
      ("reader_seq_len", orqa.reader_seq_len, config.reader_bert, "reader", CONVERSION_NAME)):
    if value > bert_config.max_position_embeddings:
      raise ValueError(f"{os.path.join(model_dir, source)}: {name} {value} exceeds the "
                       f"{bert_config.max_position_embeddings} positions of the {which} BERT's "
                       "position table; convert the checkpoint again (bin/convert_checkpoint takes "
                       "the lengths from the position tables) or set it to at most "
                       f"{bert_config.max_position_embeddings}")
  return config, orqa


def load_converted_index(index_dir: str) -> Tuple[index_lib.MipsIndex, List[Dict]]:
  """The MIPS index (index_dir/mips/) and block records (index_dir/blocks.jsonl) of a converted
  block_emb, checked to be row-aligned: search ids are rows, row i is record i.

  Raises:
    FileNotFoundError: naming index_dir and the conversion that writes what is missing.
    ConversionError: when the index and the records disagree.
  """
  mips_dir = os.path.join(index_dir, MIPS_DIR)
  blocks_path = os.path.join(index_dir, BLOCKS_NAME)
  if not tf.io.gfile.exists(os.path.join(mips_dir, index_lib.MANIFEST_NAME)):
    raise FileNotFoundError(f"{index_dir} holds no saved index {MIPS_DIR}/: pass the --output_dir of "
                            "bin/convert_checkpoint --layout=block_emb")
  if not tf.io.gfile.exists(blocks_path):
    raise FileNotFoundError(f"{index_dir} has no {BLOCKS_NAME}: the open-QA model needs the block "
                            "texts; convert the block_emb again with --blocks_path=<ORQA's blocks.tfr> "
                            "(and --titles_path=<titles.tfr>)")
  mips = index_lib.load_index(mips_dir)
  records = load_block_texts(blocks_path)
  if len(records) != mips.num_docs:
    raise ConversionError(f"{blocks_path} has {len(records)} records but {mips_dir} has "
                          f"{mips.num_docs} rows; they must come from one conversion")
  misplaced = next((i for i, record in enumerate(records) if record.get("row") != i), None)
  if misplaced is not None:
    raise ConversionError(f"{blocks_path}: line {misplaced + 1} holds row "
                          f"{records[misplaced].get('row')}, not {misplaced}; line i must be row i")
  if not np.array_equal(mips.doc_ids, np.arange(mips.num_docs)):
    raise ConversionError(f"{mips_dir}: the index's ids are not its row numbers, so search results "
                          "would not name blocks; use the index bin/convert_checkpoint wrote")
  return mips, records
