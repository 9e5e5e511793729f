"""Tests of bert_mapping (and its sources): converted weights must reproduce BERT's numbers, not just load.

Every format is checked against an independent numpy BERT (Google's modeling.py maths written out:
embeddings + LayerNorm, masked multi-head attention, gelu feed-forward, tanh pooler, MLM transform with
the decoder tied to the word embeddings) on random weights scaled so that the two gelu variants differ
measurably, on a batch with padding.
"""

import json
import math
import os
from typing import Dict, Optional

import numpy as np
from safetensors import numpy as safetensors_numpy
import tensorflow as tf

from realm_tf.checkpoints import bert_mapping
from realm_tf.checkpoints import sources
from realm_tf.modeling import bert
from realm_tf.testing import released_weights

_VOCAB = 40
_CONFIG = bert.BertConfig(vocab_size=_VOCAB,
                          hidden_size=16,
                          num_layers=2,
                          num_attention_heads=2,
                          intermediate_size=32,
                          max_position_embeddings=16,
                          type_vocab_size=2)
# A batch with padding in the second row, two segments, and two MLM positions per row.
_IDS = np.array([[2, 7, 9, 11, 3, 30], [2, 5, 39, 3, 0, 0]], np.int32)
_MASK = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], np.int32)
_TYPES = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0]], np.int32)
_POSITIONS = np.array([[1, 4], [2, 0]], np.int32)
# float32 against a float64 reference: each output sums tens to hundreds of float32 products (eps 1.2e-7),
# and oneDNN's multi-threaded reductions change the summation order with the machine's load, so the
# difference grows with the values' size. atol + rtol * |reference| covers that noise (observed up to
# 2e-5 on logits of size ~10 under load) and still fails on any mapping error, which moves values by >1e-2.
_ATOL = 1e-5
_RTOL = 1e-5

# ------------------------------------------------------------------------------------------------
# Random BERT weights in Google's TF1 layout, named relative to the bert/ and cls/ scopes.


def _random_params(config: bert.BertConfig,
                   seed: int = 0,
                   num_positions: Optional[int] = None) -> Dict[str, np.ndarray]:
  """{"bert/...": value, "cls/predictions/...": value} with TF1 names and shapes."""
  rng = np.random.default_rng(seed)
  h, i = config.hidden_size, config.intermediate_size

  def kernel(n_in, n_out):  # Scaled so activations are O(1): the gelu variants then differ visibly.
    return rng.normal(0.0, 1.5 / math.sqrt(n_in), [n_in, n_out])

  def vector(n, center=0.0):
    return center + rng.normal(0.0, 0.1, [n])

  params = {
      "bert/embeddings/word_embeddings":
          rng.normal(0.0, 1.0, [config.vocab_size, h]),
      "bert/embeddings/position_embeddings":
          rng.normal(0.0, 1.0, [num_positions or config.max_position_embeddings, h]),
      "bert/embeddings/token_type_embeddings":
          rng.normal(0.0, 1.0, [config.type_vocab_size, h]),
      "bert/embeddings/LayerNorm/gamma":
          vector(h, 1.0),
      "bert/embeddings/LayerNorm/beta":
          vector(h),
  }
  for layer in range(config.num_layers):
    scope = f"bert/encoder/layer_{layer}/"
    for name in ("query", "key", "value"):
      params[f"{scope}attention/self/{name}/kernel"] = kernel(h, h)
      params[f"{scope}attention/self/{name}/bias"] = vector(h)
    for name, n_in, n_out in (("attention/output/dense", h, h), ("intermediate/dense", h, i), ("output/dense",
                                                                                               i, h)):
      params[f"{scope}{name}/kernel"] = kernel(n_in, n_out)
      params[f"{scope}{name}/bias"] = vector(n_out)
    for name in ("attention/output/LayerNorm", "output/LayerNorm"):
      params[f"{scope}{name}/gamma"] = vector(h, 1.0)
      params[f"{scope}{name}/beta"] = vector(h)
  params["bert/pooler/dense/kernel"] = kernel(h, h)
  params["bert/pooler/dense/bias"] = vector(h)
  params["cls/predictions/transform/dense/kernel"] = kernel(h, h)
  params["cls/predictions/transform/dense/bias"] = vector(h)
  params["cls/predictions/transform/LayerNorm/gamma"] = vector(h, 1.0)
  params["cls/predictions/transform/LayerNorm/beta"] = vector(h)
  params["cls/predictions/output_bias"] = vector(config.vocab_size)
  return {name: value.astype(np.float32) for name, value in params.items()}


# ------------------------------------------------------------------------------------------------
# The independent numpy BERT (float64).


def _gelu(x: np.ndarray, exact: bool) -> np.ndarray:
  if exact:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _layer_norm(x, gamma, beta):
  mean = x.mean(-1, keepdims=True)
  variance = ((x - mean)**2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(variance + 1e-12) * gamma + beta


def _numpy_bert(params: Dict[str, np.ndarray], num_heads: int, exact_gelu: bool):
  """(sequence_output [B, L, H], pooled_output [B, H], mlm_logits [B, P, V] or None without cls/ params)
  of _IDS/_MASK/_TYPES."""
  p = {name: value.astype(np.float64) for name, value in params.items()}
  batch, length = _IDS.shape
  x = (p["bert/embeddings/word_embeddings"][_IDS] + p["bert/embeddings/position_embeddings"][:length] +
       p["bert/embeddings/token_type_embeddings"][_TYPES])
  x = _layer_norm(x, p["bert/embeddings/LayerNorm/gamma"], p["bert/embeddings/LayerNorm/beta"])
  hidden = x.shape[-1]
  head_dim = hidden // num_heads
  key_bias = (1.0 - _MASK[:, None, None, :]) * -1e9  # [B, 1, 1, L]: padded keys get no attention.
  layer = 0
  while f"bert/encoder/layer_{layer}/output/dense/kernel" in p:
    s = f"bert/encoder/layer_{layer}/"

    def heads(name):
      y = x @ p[f"{s}attention/self/{name}/kernel"] + p[f"{s}attention/self/{name}/bias"]
      return y.reshape(batch, length, num_heads, head_dim).transpose(0, 2, 1, 3)  # [B, N, L, D]

    q, k, v = heads("query"), heads("key"), heads("value")
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim) + key_bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
    attention = context @ p[f"{s}attention/output/dense/kernel"] + p[f"{s}attention/output/dense/bias"]
    x = _layer_norm(attention + x, p[f"{s}attention/output/LayerNorm/gamma"],
                    p[f"{s}attention/output/LayerNorm/beta"])
    inner = _gelu(x @ p[f"{s}intermediate/dense/kernel"] + p[f"{s}intermediate/dense/bias"], exact_gelu)
    out = inner @ p[f"{s}output/dense/kernel"] + p[f"{s}output/dense/bias"]
    x = _layer_norm(out + x, p[f"{s}output/LayerNorm/gamma"], p[f"{s}output/LayerNorm/beta"])
    layer += 1
  pooled = np.tanh(x[:, 0] @ p["bert/pooler/dense/kernel"] + p["bert/pooler/dense/bias"])
  if "cls/predictions/output_bias" not in p:
    return x, pooled, None
  gathered = np.take_along_axis(x, _POSITIONS[:, :, None], axis=1)  # [B, P, H]
  t = _gelu(
      gathered @ p["cls/predictions/transform/dense/kernel"] + p["cls/predictions/transform/dense/bias"],
      exact_gelu)
  t = _layer_norm(t, p["cls/predictions/transform/LayerNorm/gamma"],
                  p["cls/predictions/transform/LayerNorm/beta"])
  logits = t @ p["bert/embeddings/word_embeddings"].T + p["cls/predictions/output_bias"]
  return x, pooled, logits


def _run_model(encoder, masked_lm=None):
  outputs = encoder(bert.encoder_inputs(tf.constant(_IDS), tf.constant(_MASK), tf.constant(_TYPES)))
  logits = None
  if masked_lm is not None:
    logits = masked_lm(outputs["sequence_output"], masked_positions=tf.constant(_POSITIONS)).numpy()
  return outputs["sequence_output"].numpy(), outputs["pooled_output"].numpy(), logits


# ------------------------------------------------------------------------------------------------
# Writers of the source formats.


def _google_names(params: Dict[str, np.ndarray], scope: str = "") -> Dict[str, np.ndarray]:
  """The params under `scope` (e.g. "module/module/module/"), with Adam slots and global_step."""
  variables = {}
  for name, value in params.items():
    variables[scope + name] = value
    variables[f"{scope}{name}/adam_m"] = np.zeros_like(value)
    variables[f"{scope}{name}/adam_v"] = np.ones_like(value)
  variables["global_step"] = np.array(1000, np.int64)
  return variables


def _hf_names(params: Dict[str, np.ndarray], prefix: str = "bert.") -> Dict[str, np.ndarray]:
  """Hugging Face BertForPreTraining names and layouts (torch Linear weights [out, in]), written here
  independently of the converter's own mapping."""
  tensors = {}
  for name, value in params.items():
    parts = name.split("/")
    if parts[0] == "bert":
      parts = parts[1:]
      head = prefix
    else:
      head = ""
    parts = [f"layer.{part[len('layer_'):]}" if part.startswith("layer_") else part for part in parts]
    leaf = parts[-1]
    if name == "cls/predictions/output_bias":
      hf_name = "cls.predictions.bias"
    elif leaf.endswith("_embeddings"):
      hf_name = ".".join(parts) + ".weight"
    elif leaf in ("gamma", "beta"):
      hf_name = ".".join(parts[:-1]) + (".weight" if leaf == "gamma" else ".bias")
    elif leaf == "kernel":
      hf_name, value = ".".join(parts[:-1]) + ".weight", value.T
    else:
      hf_name = ".".join(parts)
    tensors[head + hf_name] = np.ascontiguousarray(value)
  return tensors


def _write_json(path: str, values: Dict) -> str:
  with open(path, "w") as f:
    json.dump(values, f)
  return path


def _hf_config(config: bert.BertConfig, hidden_act: str) -> Dict:
  return {
      "architectures": ["BertForPreTraining"],
      "model_type": "bert",
      "hidden_act": hidden_act,
      "vocab_size": config.vocab_size,
      "hidden_size": config.hidden_size,
      "num_hidden_layers": config.num_layers,
      "num_attention_heads": config.num_attention_heads,
      "intermediate_size": config.intermediate_size,
      "max_position_embeddings": config.max_position_embeddings,
      "type_vocab_size": config.type_vocab_size,
      "layer_norm_eps": 1e-12
  }


def _write_vocab(directory: str, size: int) -> str:
  path = os.path.join(directory, "vocab.txt")
  with open(path, "w") as f:
    f.write("".join(f"[unused{i}]\n" for i in range(size)))
  return path


class BertMappingTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    tf.random.set_seed(1234)  # Initial weights differ from the loaded ones in every run alike.

  def _model(self, config: bert.BertConfig = _CONFIG, with_mlm: bool = True):
    encoder = bert.build_encoder(config)
    masked_lm = bert_mapping.build_masked_lm(encoder, config) if with_mlm else None
    _run_model(encoder, masked_lm)  # builds the variables
    return encoder, masked_lm

  def _assert_matches_numpy(self, encoder, masked_lm, params, exact_gelu: bool, atol: float = _ATOL):
    expected = _numpy_bert(params, _CONFIG.num_attention_heads, exact_gelu)
    actual = _run_model(encoder, masked_lm)
    for name, want, got in zip(("sequence_output", "pooled_output", "mlm_logits"), expected, actual):
      if got is not None:
        self.assertAllClose(want, got, atol=atol, rtol=_RTOL, msg=name)

  # --- TF1 checkpoints ----------------------------------------------------------------------------

  def _check_tf1(self, scope: str, extra: Dict[str, np.ndarray]):
    params = _random_params(_CONFIG)
    variables = _google_names(params, scope)
    variables.update(extra)
    path = released_weights.write_tf1_checkpoint(os.path.join(self.create_tempdir().full_path, "model.ckpt"),
                                                 variables)
    encoder, masked_lm = self._model()
    report = bert_mapping.load_bert_weights(encoder, path, masked_lm=masked_lm)
    self.assertEqual(report.prefix, scope + "bert/")
    self.assertEqual(report.source_path, path)
    self.assertCountEqual(report.mapped, [scope + name for name in params])
    self.assertCountEqual(report.unmapped, list(extra))
    self.assertEmpty(report.unset)
    self.assertEqual(report.num_skipped, 2 * len(params) + 1)  # adam_m, adam_v, global_step
    self._assert_matches_numpy(encoder, masked_lm, params, exact_gelu=False)

  def test_tf1_checkpoint_under_bert(self):
    nsp = {"cls/seq_relationship/output_weights": np.ones([2, 16], np.float32)}
    self._check_tf1("", nsp)

  def test_tf1_checkpoint_under_nested_hub_modules(self):
    # The released REALM embedder: BERT at module/module/module/bert/, projection at module/module/.
    projection = {
        "module/module/dense/kernel": np.ones([16, 8], np.float32),
        "module/module/LayerNorm/gamma": np.ones([8], np.float32)
    }
    self._check_tf1("module/module/module/", projection)

  def test_prefix_is_required_when_ambiguous_and_accepted_without_slash(self):
    params = _random_params(_CONFIG)
    other = _random_params(_CONFIG, seed=1)
    variables = dict(_google_names(params, "reader/module/"), **_google_names(other, "embedder/"))
    path = released_weights.write_tf1_checkpoint(os.path.join(self.create_tempdir().full_path, "model.ckpt"),
                                                 variables)
    encoder, masked_lm = self._model()
    with self.assertRaisesRegex(sources.ConversionError,
                                r"several prefixes \['embedder/bert/', 'reader/module/bert/'\]"):
      bert_mapping.load_bert_weights(encoder, path)
    report = bert_mapping.load_bert_weights(encoder, path, masked_lm=masked_lm, prefix="reader/module/bert")
    self.assertEqual(report.prefix, "reader/module/bert/")
    self.assertLen(report.unmapped, len(other))  # The other BERT is reported, not loaded.
    self._assert_matches_numpy(encoder, masked_lm, params, exact_gelu=False)

  def test_longer_position_table_is_cut_and_shorter_is_an_error(self):
    params = _random_params(_CONFIG, num_positions=24)
    path = released_weights.write_tf1_checkpoint(os.path.join(self.create_tempdir().full_path, "model.ckpt"),
                                                 params)
    encoder, masked_lm = self._model()
    report = bert_mapping.load_bert_weights(encoder, path, masked_lm=masked_lm)
    self.assertLen(report.notes, 1)
    self.assertIn("24 positions; using the first 16", report.notes[0])
    self._assert_matches_numpy(encoder, masked_lm, params, exact_gelu=False)

    longer = bert.BertConfig(**dict(_CONFIG.to_dict(), max_position_embeddings=32))
    with self.assertRaisesRegex(sources.ConversionError,
                                "24 positions, fewer than the model's max_position_embeddings 32"):
      bert_mapping.load_bert_weights(bert.build_encoder(longer), path)

  # --- Hugging Face safetensors -------------------------------------------------------------------

  def test_hugging_face_safetensors_exact_gelu_and_the_activation_matters(self):
    params = _random_params(_CONFIG, seed=3)
    directory = self.create_tempdir().full_path
    tensors = _hf_names(params)
    tensors["cls.predictions.decoder.weight"] = tensors["bert.embeddings.word_embeddings.weight"]
    tensors["cls.predictions.decoder.bias"] = tensors["cls.predictions.bias"]
    tensors["cls.seq_relationship.weight"] = np.ones([2, 16], np.float32)
    path = os.path.join(directory, "model.safetensors")
    safetensors_numpy.save_file(tensors, path)
    _write_json(os.path.join(directory, "config.json"), _hf_config(_CONFIG, "gelu"))

    config = sources.config_from_source(path)
    self.assertEqual(config.hidden_act, bert.GELU_EXACT)
    self.assertEqual(config, bert.BertConfig(**dict(_CONFIG.to_dict(), hidden_act=bert.GELU_EXACT)))
    encoder, masked_lm = self._model(config)
    report = bert_mapping.load_bert_weights(encoder, directory, masked_lm=masked_lm)
    self.assertEqual(report.prefix, "bert/")
    self.assertIn("bert.encoder.layer.1.attention.self.query.weight", report.mapped)
    self.assertIn("cls.predictions.decoder.weight", report.mapped)  # checked: tied to the embeddings
    self.assertEqual(report.unmapped, ("cls.seq_relationship.weight",))
    self._assert_matches_numpy(encoder, masked_lm, params, exact_gelu=True)

    tanh_encoder, tanh_mlm = self._model(_CONFIG)  # gelu_tanh: the wrong activation for this model
    bert_mapping.load_bert_weights(tanh_encoder, path, masked_lm=tanh_mlm)
    expected = _numpy_bert(params, _CONFIG.num_attention_heads, exact_gelu=True)
    drift = [np.abs(want - got).max() for want, got in zip(expected, _run_model(tanh_encoder, tanh_mlm))]
    self.assertGreater(max(drift), 1e-4, msg=f"drift per output: {drift}")

  def test_untied_hf_decoder_is_refused(self):
    tensors = _hf_names(_random_params(_CONFIG))
    tensors["cls.predictions.decoder.weight"] = np.zeros([_VOCAB, 16], np.float32)
    path = os.path.join(self.create_tempdir().full_path, "model.safetensors")
    safetensors_numpy.save_file(tensors, path)
    encoder, masked_lm = self._model()
    with self.assertRaisesRegex(sources.ConversionError, "decoder is not tied"):
      bert_mapping.load_bert_weights(encoder, path, masked_lm=masked_lm)

  def test_hf_output_bias_from_the_decoder_copy(self):
    params = _random_params(_CONFIG, seed=6)
    tensors = _hf_names(params)
    tensors["cls.predictions.decoder.bias"] = tensors.pop("cls.predictions.bias")
    path = os.path.join(self.create_tempdir().full_path, "model.safetensors")
    safetensors_numpy.save_file(tensors, path)
    encoder, masked_lm = self._model(bert.BertConfig(**dict(_CONFIG.to_dict(), hidden_act=bert.GELU_EXACT)))
    report = bert_mapping.load_bert_weights(encoder, path, masked_lm=masked_lm, prefix="bert.")
    self.assertIn("cls.predictions.decoder.bias", report.mapped)
    self._assert_matches_numpy(encoder, masked_lm, params, exact_gelu=True)

  def test_hugging_face_directory_without_prefix(self):
    # The sentence-transformers layout (all-MiniLM-L6-v2): no "bert." prefix, a position_ids buffer.
    params = _random_params(_CONFIG, seed=4)
    directory = self.create_tempdir().full_path
    tensors = {
        name: value for name, value in _hf_names(params, prefix="").items() if not name.startswith("cls.")
    }
    tensors["embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]
    safetensors_numpy.save_file(tensors, os.path.join(directory, "model.safetensors"))
    _write_json(os.path.join(directory, "config.json"), _hf_config(_CONFIG, "gelu"))
    _write_vocab(directory, _VOCAB)
    config, encoder = bert_mapping.load_hf_bert_directory(directory)
    self.assertEqual(config.hidden_act, bert.GELU_EXACT)
    self.assertEqual(config.num_layers, 2)
    self._assert_matches_numpy(encoder, None, params, exact_gelu=True)

    _write_vocab(directory, _VOCAB + 1)
    with self.assertRaisesRegex(sources.ConversionError,
                                r"vocab.txt has 41 tokens but .*config.json says vocab_size 40"):
      bert_mapping.load_hf_bert_directory(directory)

  def test_minilm_package_when_installed(self):
    directory = sources.minilm_model_dir()
    if directory is None:
      self.skipTest(f"{sources.MINILM_PACKAGE} is not installed (optional)")
    config, encoder = bert_mapping.load_hf_bert_directory(directory)
    self.assertEqual(config, bert.minilm_l6_config())
    source = sources.open_source(directory)
    params = {
        "bert/" + source.tf_name(name): source.read(name)
        for name in source.names()
        if source.tf_name(name).startswith(("embeddings/", "encoder/", "pooler/"))
    }
    sequence, pooled, _ = _run_model(encoder)
    want_sequence, want_pooled, _ = _numpy_bert(params, config.num_attention_heads, exact_gelu=True)
    self.assertAllClose(want_sequence, sequence, atol=_ATOL, rtol=_RTOL)  # measured: 2.8e-6
    self.assertAllClose(want_pooled, pooled, atol=_ATOL, rtol=_RTOL)

  # --- Model Garden TF2 checkpoints ---------------------------------------------------------------

  def test_model_garden_tf2_round_trip(self):
    params = _random_params(_CONFIG, seed=5)
    source_path = released_weights.write_tf1_checkpoint(
        os.path.join(self.create_tempdir().full_path, "model.ckpt"), params)
    original, original_mlm = self._model()
    bert_mapping.load_bert_weights(original, source_path, masked_lm=original_mlm)
    path = tf.train.Checkpoint(encoder=original, masked_lm=original_mlm).write(
        os.path.join(self.create_tempdir().full_path, "tf2", "ckpt"))

    encoder, masked_lm = self._model()
    report = bert_mapping.load_bert_weights(encoder, path, masked_lm=masked_lm)
    self.assertEqual(report.prefix, "encoder/")
    self.assertEmpty(report.unmapped)
    self.assertLen(report.mapped, len(encoder.weights) + len(masked_lm.trainable_weights) - 1)
    for want, got in zip(original.weights + original_mlm.weights, encoder.weights + masked_lm.weights):
      self.assertAllEqual(want.numpy(), got.numpy(), msg=got.name)
    self._assert_matches_numpy(encoder, masked_lm, params, exact_gelu=False)

    # The encoder alone restores from the same checkpoint (the embeddings are shared with the head).
    alone = bert.build_encoder(_CONFIG)
    bert_mapping.restore_model_garden_checkpoint(alone, path)
    self.assertAllEqual(original.get_embedding_table().numpy(), alone.get_embedding_table().numpy())

    with self.assertRaisesRegex(
        sources.ConversionError, f"{path}: checkpoint vocab 40 vs model vocab 281: use the "
        "checkpoint's vocab.txt"):
      bert_mapping.load_bert_weights(
          bert.build_encoder(bert.BertConfig(**dict(_CONFIG.to_dict(), vocab_size=281))), path)
    with self.assertRaisesRegex(sources.ConversionError, "2 transformer layers, the model 3"):
      bert_mapping.load_bert_weights(
          bert.build_encoder(bert.BertConfig(**dict(_CONFIG.to_dict(), num_layers=3))), path)
    with self.assertRaisesRegex(
        sources.ConversionError, f"{path}: .*does not match.*"
        r"incompatible tensor with shape \(32,\).*shape \(24,\)"):
      bert_mapping.load_bert_weights(
          bert.build_encoder(bert.BertConfig(**dict(_CONFIG.to_dict(), intermediate_size=24))), path)

  # --- Bad input ----------------------------------------------------------------------------------

  def _tf1_path(self, params: Dict[str, np.ndarray]) -> str:
    return released_weights.write_tf1_checkpoint(
        os.path.join(self.create_tempdir().full_path, "bert_model.ckpt"), params)

  def test_vocab_mismatch_says_which_vocab_to_use(self):
    path = self._tf1_path(_random_params(_CONFIG))
    encoder = bert.build_encoder(bert.BertConfig(**dict(_CONFIG.to_dict(), vocab_size=281)))
    with self.assertRaisesRegex(
        sources.ConversionError, f"{path}: cannot load(.|\n)*checkpoint vocab 40 vs model vocab 281: use "
        "the checkpoint's vocab.txt"):
      bert_mapping.load_bert_weights(encoder, path)

  def test_missing_variable_is_listed_and_left_unset_when_not_strict(self):
    params = _random_params(_CONFIG)
    del params["bert/encoder/layer_1/output/dense/bias"]
    path = self._tf1_path(params)
    encoder, _ = self._model(with_mlm=False)
    bias = encoder.transformer_layers[1]._output_dense.bias  # pylint: disable=protected-access
    before = bias.numpy()
    with self.assertRaisesRegex(
        sources.ConversionError, f"{path}(.|\n)*missing from the source: "
        "bert/encoder/layer_1/output/dense/bias"):
      bert_mapping.load_bert_weights(encoder, path)
    # Strict loading is all or nothing: nothing was assigned.
    self.assertNotAllClose(encoder.get_embedding_table().numpy(), params["bert/embeddings/word_embeddings"])

    report = bert_mapping.load_bert_weights(encoder, path, strict=False)
    self.assertEqual(report.unset, ("bert/transformer/layer_1/output/bias:0",))
    self.assertAllEqual(before, bias.numpy())
    self.assertAllEqual(params["bert/embeddings/word_embeddings"], encoder.get_embedding_table().numpy())

  def test_mlm_requested_but_absent_is_listed(self):
    params = {n: v for n, v in _random_params(_CONFIG).items() if not n.startswith("cls/")}
    path = self._tf1_path(params)
    encoder, masked_lm = self._model()
    with self.assertRaisesRegex(sources.ConversionError,
                                "missing from the source: cls/predictions/output_bias"):
      bert_mapping.load_bert_weights(encoder, path, masked_lm=masked_lm)
    self.assertEmpty(bert_mapping.load_bert_weights(encoder, path).unset)  # the body alone loads

  def test_extra_variables_are_reported_and_extra_layers_are_an_error(self):
    deeper = bert.BertConfig(**dict(_CONFIG.to_dict(), num_layers=3))
    params = _random_params(deeper)
    params["bert/extra_scope/kernel"] = np.ones([2], np.float32)
    path = self._tf1_path(params)
    encoder, _ = self._model(with_mlm=False)
    with self.assertRaisesRegex(
        sources.ConversionError, r"16 source variables inside the BERT scope have no model weight"
        r"(.|\n)*bert/encoder/layer_2/attention/output/LayerNorm/beta"):
      bert_mapping.load_bert_weights(encoder, path)
    report = bert_mapping.load_bert_weights(encoder, path, strict=False)
    self.assertIn("bert/extra_scope/kernel", report.unmapped)
    self.assertIn("bert/encoder/layer_2/output/dense/kernel", report.unmapped)
    self.assertIn("cls/predictions/output_bias", report.unmapped)  # no masked_lm: reported, not used
    self.assertEmpty(report.unset)

  def test_shape_mismatch_lists_both_shapes_and_the_file(self):
    params = _random_params(bert.BertConfig(**dict(_CONFIG.to_dict(), intermediate_size=24)))
    path = self._tf1_path(params)
    encoder, _ = self._model(with_mlm=False)
    with self.assertRaisesRegex(
        sources.ConversionError,
        f"{path}(.|\n)*shape mismatch: bert/encoder/layer_0/intermediate/dense/kernel: source "
        r"\[16, 24\] vs model \[16, 32\] \(bert/transformer/layer_0/intermediate/kernel:0\)"):
      bert_mapping.load_bert_weights(encoder, path)

  def test_attention_shape_mismatch_names_the_model_layout(self):
    params = _random_params(_CONFIG)
    params["bert/encoder/layer_0/attention/self/query/kernel"] = np.ones([16, 12], np.float32)
    path = self._tf1_path(params)
    with self.assertRaisesRegex(
        sources.ConversionError, r"query/kernel: source \[16, 12\] vs model \[16, 16\] \(model "
        r"bert/transformer/layer_0/self_attention/query/kernel:0 \[16, 2, 8\]\)"):
      bert_mapping.load_bert_weights(bert.build_encoder(_CONFIG), path)

  def test_no_bert_in_source(self):
    path = self._tf1_path({"dense/kernel": np.ones([2, 2], np.float32)})
    with self.assertRaisesRegex(sources.ConversionError, f"{path}: no BERT in the source .*dense/kernel"):
      bert_mapping.load_bert_weights(bert.build_encoder(_CONFIG), path)

  # --- Configs ------------------------------------------------------------------------------------

  def test_config_activation_depends_on_the_format(self):
    directory = self.create_tempdir().full_path
    google = dict(vocab_size=_VOCAB,
                  hidden_size=16,
                  num_hidden_layers=2,
                  num_attention_heads=2,
                  intermediate_size=32,
                  hidden_act="gelu",
                  max_position_embeddings=16)
    _write_json(os.path.join(directory, "bert_config.json"), google)
    # Google BERT's "gelu" is its tanh approximation (modeling.gelu).
    self.assertEqual(
        sources.config_from_source(os.path.join(directory, "bert_model.ckpt")).hidden_act, bert.GELU_TANH)
    for act, want in (("gelu", bert.GELU_EXACT), ("gelu_new", bert.GELU_TANH)):
      hf_path = _write_json(os.path.join(directory, f"{act}.json"), _hf_config(_CONFIG, act))
      self.assertEqual(sources.config_from_source(hf_path).hidden_act, want, msg=act)
    bad = _write_json(os.path.join(directory, "eps.json"),
                      dict(_hf_config(_CONFIG, "gelu"), layer_norm_eps=1e-5))
    with self.assertRaisesRegex(sources.ConversionError, "eps.json: layer_norm_eps 1e-05"):
      sources.config_from_source(bad)

  def test_untied_masked_lm_is_refused(self):
    encoder = bert.build_encoder(_CONFIG)
    other = bert.build_encoder(_CONFIG, name="other")
    masked_lm = bert_mapping.build_masked_lm(other, _CONFIG)
    path = self._tf1_path(_random_params(_CONFIG))
    with self.assertRaisesRegex(ValueError, "must be tied to encoder 'bert'"):
      bert_mapping.load_bert_weights(encoder, path, masked_lm=masked_lm)


if __name__ == "__main__":
  tf.test.main()
