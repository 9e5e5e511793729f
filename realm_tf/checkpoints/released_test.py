"""Tests of released: the released REALM/ORQA layouts must load AND compute as the originals.

Each test writes a tiny TF1 checkpoint (tf.compat.v1 graph, get_variable, Saver) with exactly the
released variable names (peers.md 1.3, original_realm_orqa.md 5.3), Adam slots and global_step
included, and checks the loaded Keras models against an independent float64 numpy implementation of the
original maths: BERT (embeddings + LayerNorm 1e-12, masked multi-head attention, tanh gelu, tanh
pooler), the REALM embedder (pooled_output -> dense -> LayerNorm 1e-12; scores q.d), the MLM head
(transform dense + gelu + LayerNorm, decoder tied to the word embeddings, output bias) and ORQA's span
scorer (dense -> start|end -> relu(start[s] + end[e]) -> LayerNorm 1e-3 -> dense_1, plus the retriever
logit). Kernels are scaled so that activations are O(1): the tanh/erf gelu variants and the 1e-3/1e-12
epsilons then differ measurably.
"""

import json
import math
import os

import numpy as np
import tensorflow as tf

from realm_tf.checkpoints import released as rc
from realm_tf.checkpoints import sources
from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.testing import released_weights
from realm_tf.testing import tiny_inputs

_VOCAB = 60
_HEADS = 2
_CONFIG = bert.BertConfig(vocab_size=_VOCAB,
                          hidden_size=32,
                          num_layers=2,
                          num_attention_heads=_HEADS,
                          intermediate_size=64,
                          max_position_embeddings=16,
                          type_vocab_size=2)
_PROJECTION = 16
_SPAN_HIDDEN = 8
# float32 against a float64 reference: each output sums tens to hundreds of float32 products (eps 1.2e-7),
# and oneDNN's multi-threaded reductions change the summation order with the machine's load, so the
# difference grows with the values' size. atol + rtol * |reference| covers that noise (observed up to
# 2e-5 on logits of size ~10 under load) and still fails on any mapping error, which moves values by >1e-2.
_ATOL = 1e-5
_RTOL = 1e-5

# A batch with padding in the second row and two segments; MLM positions per row.
_IDS = np.array([[2, 7, 9, 11, 3, 30], [2, 5, 59, 3, 0, 0]], np.int32)
_MASK = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], np.int32)
_TYPES = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0]], np.int32)
_POSITIONS = np.array([[1, 4], [2, 0]], np.int32)
# Three documents for the retriever.
_DOC_IDS = np.array([[2, 40, 41, 42, 3, 0], [2, 8, 3, 0, 0, 0], [2, 13, 17, 19, 23, 3]], np.int32)
_DOC_MASK = (_DOC_IDS > 0).astype(np.int32)
_DOC_TYPES = np.zeros_like(_DOC_IDS)
# The reader: one question, two blocks of length 6: [CLS] q [SEP] block... (block mask on the block).
_READER_IDS = np.array([[[2, 7, 3, 31, 32, 33], [2, 7, 3, 44, 45, 46]]], np.int32)
_READER_TYPES = np.array([[[0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1]]], np.int32)
_BLOCK_MASK = np.array([[[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1]]], np.int32)
_MAX_SPAN_WIDTH = 3

_EMBEDDER_BERT = "module/module/module/bert/"
_EMBEDDER_HEAD = "module/module/"
_ORQA_BERT = released_weights.ORQA_RETRIEVER_BERT
_ORQA_HEAD = released_weights.ORQA_RETRIEVER_HEAD
_READER_BERT = released_weights.ORQA_READER_BERT

# ------------------------------------------------------------------------------------------------
# Random weights with the released names (released_weights.ReleasedWeights).

_f32 = released_weights.float32_weights


def _realm_bert_params(seed=0):
  p = released_weights.ReleasedWeights(seed)
  return _f32({**p.bert_body("bert/", _CONFIG), **p.mlm("cls/predictions/", _CONFIG)})


def _embedder_params(seed=1):
  p = released_weights.ReleasedWeights(seed)
  return _f32({
      **p.bert_body(_EMBEDDER_BERT, _CONFIG),
      **p.mlm("module/module/module/cls/predictions/", _CONFIG),
      **p.projection(_EMBEDDER_HEAD, _CONFIG.hidden_size, _PROJECTION)
  })


def _orqa_params(seed=2):
  return released_weights.released_orqa_weights(_CONFIG, _PROJECTION, _SPAN_HIDDEN, seed)


_with_optimizer = released_weights.with_optimizer_slots


def _write_vocab(directory: str, size: int = _VOCAB) -> str:
  tokens = tiny_inputs.SPECIAL_TOKENS + [f"[unused{i}]" for i in range(size - 5)]
  return tiny_inputs.write_vocab(directory, tokens)


# ------------------------------------------------------------------------------------------------
# The independent numpy implementation (float64) of the original models.


def _gelu_tanh(x):
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _layer_norm(x, gamma, beta, epsilon):
  mean = x.mean(-1, keepdims=True)
  variance = ((x - mean)**2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def _np_bert(params, prefix, ids, mask, types, num_heads=_HEADS):
  """(sequence_output [B, L, H], pooled_output [B, H]) of Google BERT with the weights under prefix."""
  p = {
      name[len(prefix):]: value.astype(np.float64) for name, value in params.items() if name.startswith(prefix)
  }
  batch, length = ids.shape
  x = (p["embeddings/word_embeddings"][ids] + p["embeddings/position_embeddings"][:length] +
       p["embeddings/token_type_embeddings"][types])
  x = _layer_norm(x, p["embeddings/LayerNorm/gamma"], p["embeddings/LayerNorm/beta"], 1e-12)
  hidden = x.shape[-1]
  head_dim = hidden // num_heads
  key_bias = (1.0 - mask[:, None, None, :]) * -1e9
  layer = 0
  while f"encoder/layer_{layer}/output/dense/kernel" in p:
    s = f"encoder/layer_{layer}/"

    def heads(name):
      y = x @ p[f"{s}attention/self/{name}/kernel"] + p[f"{s}attention/self/{name}/bias"]
      return y.reshape(batch, length, num_heads, head_dim).transpose(0, 2, 1, 3)

    q, k, v = heads("query"), heads("key"), heads("value")
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim) + key_bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
    attention = context @ p[f"{s}attention/output/dense/kernel"] + p[f"{s}attention/output/dense/bias"]
    x = _layer_norm(attention + x, p[f"{s}attention/output/LayerNorm/gamma"],
                    p[f"{s}attention/output/LayerNorm/beta"], 1e-12)
    inner = _gelu_tanh(x @ p[f"{s}intermediate/dense/kernel"] + p[f"{s}intermediate/dense/bias"])
    out = inner @ p[f"{s}output/dense/kernel"] + p[f"{s}output/dense/bias"]
    x = _layer_norm(out + x, p[f"{s}output/LayerNorm/gamma"], p[f"{s}output/LayerNorm/beta"], 1e-12)
    layer += 1
  pooled = np.tanh(x[:, 0] @ p["pooler/dense/kernel"] + p["pooler/dense/bias"])
  return x, pooled


def _np_mlm_logits(params, bert_prefix, mlm_prefix, ids, mask, types, positions):
  p = {name: value.astype(np.float64) for name, value in params.items()}
  sequence, _ = _np_bert(params, bert_prefix, ids, mask, types)
  gathered = np.take_along_axis(sequence, positions[:, :, None], axis=1)
  t = _gelu_tanh(gathered @ p[mlm_prefix + "transform/dense/kernel"] + p[mlm_prefix + "transform/dense/bias"])
  t = _layer_norm(t, p[mlm_prefix + "transform/LayerNorm/gamma"], p[mlm_prefix + "transform/LayerNorm/beta"],
                  1e-12)
  return t @ p[bert_prefix + "embeddings/word_embeddings"].T + p[mlm_prefix + "output_bias"]


def _np_embed(params, bert_prefix, head, ids, mask, types):
  p = {name: value.astype(np.float64) for name, value in params.items()}
  _, pooled = _np_bert(params, bert_prefix, ids, mask, types)
  projected = pooled @ p[head + "dense/kernel"] + p[head + "dense/bias"]
  return _layer_norm(projected, p[head + "LayerNorm/gamma"], p[head + "LayerNorm/beta"], 1e-12)


def _np_span_logits(params, retriever_logits):
  """ORQA reader logits [B, K, S] over width-major spans, and the span (start, end) list."""
  p = {name: value.astype(np.float64) for name, value in params.items()}
  batch, beam, length = _READER_IDS.shape
  flat = [x.reshape(batch * beam, length) for x in (_READER_IDS, np.ones_like(_READER_IDS), _READER_TYPES)]
  sequence, _ = _np_bert(params, _READER_BERT, *flat)
  projected = sequence @ p["reader/dense/kernel"] + p["reader/dense/bias"]
  start, end = projected[..., :_SPAN_HIDDEN], projected[..., _SPAN_HIDDEN:]
  spans = [(s, s + w - 1) for w in range(1, _MAX_SPAN_WIDTH + 1) for s in range(length - w + 1)]
  block_mask = _BLOCK_MASK.reshape(batch * beam, length)
  logits = np.zeros([batch * beam, len(spans)])
  inside = np.zeros([batch * beam, len(spans)], bool)
  for j, (s, e) in enumerate(spans):
    h = np.maximum(start[:, s] + end[:, e], 0.0)
    h = _layer_norm(h, p["reader/layer_normalization/gamma"], p["reader/layer_normalization/beta"], 1e-3)
    logits[:, j] = (h @ p["reader/dense_1/kernel"])[:, 0] + p["reader/dense_1/bias"][0]
    inside[:, j] = block_mask[:, s] * block_mask[:, e] == 1
  logits = logits.reshape(batch, beam, -1) + retriever_logits[:, :, None]
  return logits, inside.reshape(batch, beam, -1), spans


# ------------------------------------------------------------------------------------------------
# Running the Keras models.


def _bert_inputs(ids, mask, types):
  return tuple(tf.constant(x) for x in (ids, mask, types))


def _embeddings(retriever):
  queries = retriever.embed_queries(_bert_inputs(_IDS, _MASK, _TYPES)).numpy()
  docs = retriever.embed_documents(_bert_inputs(_DOC_IDS, _DOC_MASK, _DOC_TYPES)).numpy()
  return queries, docs


def _reader_logits(reader, retriever_logits):
  inputs = _bert_inputs(_READER_IDS, np.ones_like(_READER_IDS), _READER_TYPES)
  output = reader((inputs, tf.constant(_BLOCK_MASK), tf.constant(retriever_logits, tf.float32)))
  return output


def _kae_logits(model):
  return model((_bert_inputs(_IDS, _MASK, _TYPES), tf.constant(_POSITIONS))).numpy()


class ReleasedTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    tf.random.set_seed(1234)  # Initial weights differ from the loaded ones, the same in every run.
    self._dir = self.create_tempdir().full_path

  def _checkpoint(self, params, name="model.ckpt", optimizer=True):
    variables = _with_optimizer(params) if optimizer else dict(params)
    return released_weights.write_tf1_checkpoint(os.path.join(self._dir, name), variables)

  def _assert_clean_report(self, report, params, ignored_prefixes=()):
    ignored = sorted(n for n in params if n.startswith(tuple(ignored_prefixes))) \
        if ignored_prefixes else []
    self.assertCountEqual(report.mapped, [n for n in params if n not in ignored])
    self.assertCountEqual(report.ignored, ignored)
    self.assertEmpty(report.unmapped)
    self.assertEmpty(report.unset)
    self.assertEqual(report.num_skipped, 2 * len(params) + 1)  # adam_m, adam_v, global_step

  # --- the three model layouts against numpy -----------------------------------------------------

  def test_realm_bert_matches_the_original_mlm(self):
    params = _realm_bert_params()
    path = self._checkpoint(params)
    loaded = rc.load_released(path, num_attention_heads=_HEADS)
    self.assertEqual(loaded.layout.name, rc.REALM_BERT)
    self.assertEqual(loaded.layout.encoder_bert, "bert/")
    self.assertEqual(loaded.encoder_config, _CONFIG)
    self._assert_clean_report(loaded.report, params)
    expected = _np_mlm_logits(params, "bert/", "cls/predictions/", _IDS, _MASK, _TYPES, _POSITIONS)
    self.assertAllClose(expected, _kae_logits(loaded.knowledge_augmented_encoder), atol=_ATOL, rtol=_RTOL)

  def test_realm_embedder_matches_the_original_scores(self):
    params = _embedder_params()
    path = self._checkpoint(params)
    loaded = rc.load_released(path, num_attention_heads=_HEADS)
    layout = loaded.layout
    self.assertEqual((layout.name, layout.retriever_bert, layout.projection_scope),
                     (rc.REALM_EMBEDDER, _EMBEDDER_BERT, _EMBEDDER_HEAD))
    self.assertEqual(loaded.projection_size, _PROJECTION)
    self._assert_clean_report(loaded.report, params, ["module/module/module/cls/"])
    self.assertLen(loaded.report.ignored, 5)
    want_q = _np_embed(params, _EMBEDDER_BERT, _EMBEDDER_HEAD, _IDS, _MASK, _TYPES)
    want_d = _np_embed(params, _EMBEDDER_BERT, _EMBEDDER_HEAD, _DOC_IDS, _DOC_MASK, _DOC_TYPES)
    queries, docs = _embeddings(loaded.retriever)
    self.assertAllClose(want_q, queries, atol=_ATOL, rtol=_RTOL)
    self.assertAllClose(want_d, docs, atol=_ATOL, rtol=_RTOL)
    self.assertAllClose(want_q @ want_d.T, queries @ docs.T, atol=_ATOL, rtol=_RTOL)
    # Two separate towers both get the released weights.
    retriever = embedder_lib.build_retriever(_CONFIG, _PROJECTION, share_embedders=False)
    report = rc.load_retriever(retriever, path)
    self.assertEmpty(report.unmapped)
    queries2, docs2 = _embeddings(retriever)
    self.assertAllClose(want_q, queries2, atol=_ATOL, rtol=_RTOL)
    self.assertAllClose(want_d, docs2, atol=_ATOL, rtol=_RTOL)

  def test_orqa_from_realm_matches_the_original_reader_and_retriever(self):
    params = _orqa_params()
    path = self._checkpoint(params)
    loaded = rc.load_released(path,
                              num_attention_heads=_HEADS,
                              reader_seq_len=6,
                              max_span_width=_MAX_SPAN_WIDTH)
    layout = loaded.layout
    self.assertEqual((layout.name, layout.retriever_bert, layout.projection_scope, layout.reader_bert,
                      layout.span_head_scope),
                     (rc.ORQA_FROM_REALM, _ORQA_BERT, _ORQA_HEAD, _READER_BERT, "reader/"))
    self.assertEqual((loaded.projection_size, loaded.span_hidden_size), (_PROJECTION, _SPAN_HIDDEN))
    self._assert_clean_report(loaded.report, params,
                              ["module/module/module/module/cls/", "reader/module/cls/"])
    self.assertLen(loaded.report.ignored, 10)
    self.assertIn("layout orqa_from_realm", layout.describe())
    # The retriever logit of block k is q . d_k, as ORQA adds it to every span of the block.
    want_q = _np_embed(params, _ORQA_BERT, _ORQA_HEAD, _IDS[:1], _MASK[:1], _TYPES[:1])
    want_d = _np_embed(params, _ORQA_BERT, _ORQA_HEAD, _DOC_IDS[:2], _DOC_MASK[:2], _DOC_TYPES[:2])
    queries, docs = _embeddings(loaded.retriever)
    self.assertAllClose(want_q, queries[:1], atol=_ATOL, rtol=_RTOL)
    self.assertAllClose(want_d, docs[:2], atol=_ATOL, rtol=_RTOL)
    retriever_logits = want_q @ want_d.T  # [1, 2]
    expected, inside, spans = _np_span_logits(params, retriever_logits)
    output = _reader_logits(loaded.reader, queries[:1] @ docs[:2].T)
    self.assertEqual(list(zip(output.span_starts.numpy(), output.span_ends.numpy())), spans)
    logits = output.logits.numpy()
    self.assertGreater(inside.sum(), 0)
    self.assertAllClose(expected[inside], logits[inside], atol=_ATOL, rtol=_RTOL)
    # Masked spans get -10000 (float32 steps there are ~1e-3).
    self.assertAllClose(expected[~inside] - 10000.0, logits[~inside], atol=2e-3, rtol=0)

  # --- detection -----------------------------------------------------------------------------------

  def test_layout_detection_and_unknown_layouts(self):
    self.assertEqual(rc.detect_layout(self._checkpoint(_embedder_params(), "e.ckpt")).name, rc.REALM_EMBEDDER)
    block = released_weights.write_tf1_checkpoint(os.path.join(self._dir, "encoded.ckpt"),
                                                  {"block_emb": np.ones([3, 4], np.float32)})
    self.assertEqual(rc.detect_layout(block).block_emb, "block_emb")
    # A layout asked for must be the one found.
    with self.assertRaisesRegex(sources.ConversionError, r"layout realm_bert was asked for.*realm_embedder"):
      rc.detect_layout(os.path.join(self._dir, "e.ckpt"), rc.REALM_BERT)
    # A bare BERT (no MLM head, no retriever or reader head) is none of the released layouts.
    bare = {n: v for n, v in _realm_bert_params().items() if n.startswith("bert/")}
    path = self._checkpoint(bare, "bare.ckpt")
    with self.assertRaisesRegex(
        sources.ConversionError, r"bare\.ckpt: not a released REALM/ORQA layout"
        r"(.|\n)*'bert/' \(bare\)(.|\n)*top-level scopes: bert/ \(\d+\)"):
      rc.detect_layout(path)
    other = released_weights.write_tf1_checkpoint(os.path.join(self._dir, "other.ckpt"), {
        "foo/kernel": np.ones([2, 2], np.float32),
        "global_step": np.array(1, np.int64)
    })
    with self.assertRaisesRegex(
        sources.ConversionError, r"other\.ckpt(.|\n)*BERT scopes found[^;]*: none"
        r"(.|\n)*foo/ \(1\)(.|\n)*foo/kernel"):
      rc.detect_layout(other)

  def test_name_suffix_mapping_tolerates_other_nesting_depths(self):
    """An embedder re-exported one hub level deeper (and a REALM trainer's bert/bert/) still loads."""
    deeper = {"module/" + name: value for name, value in _embedder_params().items()}
    loaded = rc.load_released(self._checkpoint(deeper, "deep.ckpt"), num_attention_heads=_HEADS)
    self.assertEqual(loaded.layout.retriever_bert, "module/" + _EMBEDDER_BERT)
    self.assertEqual(loaded.layout.projection_scope, "module/" + _EMBEDDER_HEAD)
    self.assertEmpty(loaded.report.unmapped)
    self.assertLen(loaded.report.ignored, 5)
    trainer = {"bert/" + name: value for name, value in _realm_bert_params().items()}
    loaded = rc.load_released(self._checkpoint(trainer, "trainer.ckpt"), num_attention_heads=_HEADS)
    self.assertEqual(loaded.layout.encoder_bert, "bert/bert/")
    self.assertEmpty(loaded.report.unmapped)

  # --- errors --------------------------------------------------------------------------------------

  def test_missing_variables_are_named_with_the_file(self):
    params = _orqa_params()
    del params["module/module/module/LayerNorm/beta"]
    del params["reader/module/bert/encoder/layer_1/output/dense/bias"]
    path = self._checkpoint(params, "orqa.ckpt")
    with self.assertRaises(sources.ConversionError) as raised:
      rc.load_released(path, num_attention_heads=_HEADS, reader_seq_len=6)
    message = str(raised.exception)
    self.assertIn(path, message)
    self.assertIn("missing from the checkpoint: module/module/module/LayerNorm/beta", message)
    self.assertIn("reader/module/bert/encoder/layer_1/output/dense/bias", message)
    # strict=False loads what fits and reports the rest as unset.
    loaded = rc.load_released(path, num_attention_heads=_HEADS, reader_seq_len=6, strict=False)
    self.assertLen(loaded.report.unset, 2)
    self.assertTrue(any("layer_norm/beta" in n for n in loaded.report.unset), loaded.report.unset)
    self.assertTrue(any(n.startswith("reader/") and "layer_1/output/bias" in n for n in loaded.report.unset),
                    loaded.report.unset)
    self.assertIn("unset: ", loaded.report.summary())
    self.assertEmpty(loaded.report.unmapped)

  def test_unexpected_variables_are_reported_as_unmapped(self):
    params = dict(_embedder_params(), **{"module/module/extra/kernel": np.ones([2], np.float32)})
    report = rc.load_released(self._checkpoint(params), num_attention_heads=_HEADS).report
    self.assertEqual(report.unmapped, ("module/module/extra/kernel",))
    self.assertIn("unmapped: module/module/extra/kernel", report.summary())

  def test_config_mismatches(self):
    path = self._checkpoint(_embedder_params(), optimizer=False)
    config_path = os.path.join(self._dir, "bert_config.json")
    with open(config_path, "w") as f:
      json.dump(dict(sources.google_bert_config_dict(_CONFIG), vocab_size=_VOCAB + 1), f)
    with self.assertRaisesRegex(
        sources.ConversionError, rf"{config_path} does not describe(.|\n)*"
        rf"vocab_size {_VOCAB + 1} \(config\) vs {_VOCAB} \(checkpoint\)"):
      rc.load_released(path, bert_config_path=config_path)
    # A matching config gives the heads; without one they are hidden_size / 64, here impossible.
    with open(config_path, "w") as f:
      json.dump(sources.google_bert_config_dict(_CONFIG), f)
    self.assertEqual(rc.load_released(path, bert_config_path=config_path).retriever_config, _CONFIG)
    with self.assertRaisesRegex(sources.ConversionError, r"hidden_size 32 .*--num_attention_heads"):
      rc.load_released(path)

  def test_models_with_other_numerics_are_refused(self):
    path = self._checkpoint(_embedder_params(), optimizer=False)
    ict_style = embedder_lib.build_retriever(_CONFIG, _PROJECTION, layer_norm_epsilon=1e-3)
    with self.assertRaisesRegex(ValueError, r"epsilon 0\.001, the released model 1e-12"):
      rc.load_retriever(ict_style, path)
    exact = embedder_lib.build_retriever(
        bert.BertConfig(**dict(_CONFIG.to_dict(), hidden_act=bert.GELU_EXACT)), _PROJECTION)
    with self.assertRaisesRegex(ValueError, "tanh gelu"):
      rc.load_retriever(exact, path)


if __name__ == "__main__":
  tf.test.main()
