"""Google's released TF1 checkpoints in miniature, for the conversion tests."""

from typing import Dict

import numpy as np
import tensorflow as tf


def write_tf1_checkpoint(path: str, variables: Dict[str, np.ndarray]) -> str:
  """A TF1 name-based checkpoint (graph mode, get_variable, tf.compat.v1.train.Saver) holding exactly
  `variables`, as Google's original BERT, REALM and ORQA releases are written; returns its prefix."""
  with tf.compat.v1.Graph().as_default() as graph:
    tf_vars = [
        tf.compat.v1.get_variable(name, initializer=tf.constant(value)) for name, value in variables.items()
    ]
    saver = tf.compat.v1.train.Saver(tf_vars)
    with tf.compat.v1.Session(graph=graph) as session:
      session.run(tf.compat.v1.global_variables_initializer())
      return saver.save(session, path, write_meta_graph=False)


# Google's released checkpoints in miniature (realm_tf.checkpoints.released reads them): random
# weights under the released TF1 variable names, for conversion tests to write with write_tf1_checkpoint.
ORQA_RETRIEVER_BERT = "module/module/module/module/bert/"
ORQA_RETRIEVER_HEAD = "module/module/module/"  # the retriever's projection dense/ and LayerNorm/
ORQA_READER_BERT = "reader/module/bert/"
ORQA_READER_HEAD = "reader/"  # the span head: dense/, dense_1/, layer_normalization/


class ReleasedWeights:
  """Deterministic random weights with the released names, scaled so that activations are O(1) (then
  the tanh/erf gelu variants and the 1e-3/1e-12 LayerNorm epsilons differ measurably). float64;
  `config` is any BERT config (realm_tf.modeling.bert.BertConfig)."""

  def __init__(self, seed: int):
    self._rng = np.random.default_rng(seed)

  def kernel(self, n_in, n_out):
    return self._rng.normal(0.0, 1.5 / np.sqrt(n_in), [n_in, n_out])

  def vector(self, n, center=0.0):
    return center + self._rng.normal(0.0, 0.1, [n])

  def table(self, rows, cols):
    return self._rng.normal(0.0, 1.0, [rows, cols])

  def bert_body(self, scope: str, config) -> Dict[str, np.ndarray]:
    """Google BERT's embeddings, encoder/layer_<i> and pooler under scope."""
    h, i = config.hidden_size, config.intermediate_size
    params = {
        "embeddings/word_embeddings": self.table(config.vocab_size, h),
        "embeddings/position_embeddings": self.table(config.max_position_embeddings, h),
        "embeddings/token_type_embeddings": self.table(config.type_vocab_size, h),
        "embeddings/LayerNorm/gamma": self.vector(h, 1.0),
        "embeddings/LayerNorm/beta": self.vector(h),
    }
    for layer in range(config.num_layers):
      s = f"encoder/layer_{layer}/"
      for name in ("query", "key", "value"):
        params[f"{s}attention/self/{name}/kernel"] = self.kernel(h, h)
        params[f"{s}attention/self/{name}/bias"] = self.vector(h)
      for name, n_in, n_out in (("attention/output/dense", h, h), ("intermediate/dense", h, i),
                                ("output/dense", i, h)):
        params[f"{s}{name}/kernel"] = self.kernel(n_in, n_out)
        params[f"{s}{name}/bias"] = self.vector(n_out)
      for name in ("attention/output/LayerNorm", "output/LayerNorm"):
        params[f"{s}{name}/gamma"] = self.vector(h, 1.0)
        params[f"{s}{name}/beta"] = self.vector(h)
    params["pooler/dense/kernel"] = self.kernel(h, h)
    params["pooler/dense/bias"] = self.vector(h)
    return {scope + name: value for name, value in params.items()}

  def mlm(self, scope: str, config) -> Dict[str, np.ndarray]:
    """BERT's masked-LM head (cls/predictions/) under scope."""
    h = config.hidden_size
    return {
        scope + "transform/dense/kernel": self.kernel(h, h),
        scope + "transform/dense/bias": self.vector(h),
        scope + "transform/LayerNorm/gamma": self.vector(h, 1.0),
        scope + "transform/LayerNorm/beta": self.vector(h),
        scope + "output_bias": self.vector(config.vocab_size)
    }

  def projection(self, scope: str, hidden_size: int, projection_size: int) -> Dict[str, np.ndarray]:
    """The REALM embedder's pooled_output -> projection_size dense and LayerNorm under scope."""
    return {
        scope + "dense/kernel": self.kernel(hidden_size, projection_size),
        scope + "dense/bias": self.vector(projection_size),
        scope + "LayerNorm/gamma": self.vector(projection_size, 1.0),
        scope + "LayerNorm/beta": self.vector(projection_size)
    }

  def span_head(self, scope: str, hidden_size: int, span_hidden_size: int) -> Dict[str, np.ndarray]:
    """ORQA's span scorer (dense -> start | end, layer_normalization, dense_1) under scope."""
    return {
        scope + "dense/kernel": self.kernel(hidden_size, 2 * span_hidden_size),
        scope + "dense/bias": self.vector(2 * span_hidden_size),
        scope + "dense_1/kernel": self.kernel(span_hidden_size, 1),
        scope + "dense_1/bias": self.vector(1),
        scope + "layer_normalization/gamma": self.vector(span_hidden_size, 1.0),
        scope + "layer_normalization/beta": self.vector(span_hidden_size)
    }


def float32_weights(params: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
  return {name: value.astype(np.float32) for name, value in params.items()}


def released_orqa_weights(config,
                          projection_size: int,
                          span_hidden_size: int,
                          seed: int = 2) -> Dict[str, np.ndarray]:
  """float32 weights of an orqa_{nq,wq}_model_from_realm checkpoint: the retriever's BERT, its unused
  MLM head and projection; the reader's BERT, its unused MLM head and the span head (one config for
  both BERTs)."""
  p = ReleasedWeights(seed)
  return float32_weights({
      **p.bert_body(ORQA_RETRIEVER_BERT, config),
      **p.mlm(ORQA_RETRIEVER_HEAD + "module/cls/predictions/", config),
      **p.projection(ORQA_RETRIEVER_HEAD, config.hidden_size, projection_size),
      **p.bert_body(ORQA_READER_BERT, config),
      **p.mlm(ORQA_READER_HEAD + "module/cls/predictions/", config),
      **p.span_head(ORQA_READER_HEAD, config.hidden_size, span_hidden_size)
  })


def with_optimizer_slots(params: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """The params plus BERT-optimizer slots (adam_m, adam_v) and global_step, as in the released
  checkpoints (conversion must skip them)."""
  variables = dict(params)
  for name, value in params.items():
    variables[name + "/adam_m"] = np.zeros_like(value)
    variables[name + "/adam_v"] = np.ones_like(value)
  variables["global_step"] = np.array(1000, np.int64)
  return variables
