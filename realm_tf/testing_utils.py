"""Helpers shared by the tests.

The public data sets the tests read live outside the repository, in ../shared/data (see its README);
bin/test passes their location to Bazel tests as REALM_TF_SHARED_DATA. Tests that need them call
shared_data_dir() and skip when it returns None.
"""

import contextlib
import functools
import json
import os
import string
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

SHARED_DATA_ENV = "REALM_TF_SHARED_DATA"


def repo_root() -> str:
  """The repository root, found from this file's real location (Bazel runfiles are symlinks)."""
  return os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def shared_data_dir() -> Optional[str]:
  """The shared data directory: $REALM_TF_SHARED_DATA if set, else <repo>/../shared/data; None if absent."""
  path = os.environ.get(SHARED_DATA_ENV) or os.path.join(repo_root(), "..", "shared", "data")
  path = os.path.normpath(path)
  return path if os.path.isdir(path) else None


def shared_data_path(*parts: str) -> Optional[str]:
  """A file under the shared data directory, or None when the directory or the file is missing."""
  root = shared_data_dir()
  if root is None:
    return None
  path = os.path.join(root, *parts)
  return path if os.path.exists(path) else None


def write_small_bert_config(directory: str, max_position_embeddings: int = 128) -> str:
  """A one-layer, hidden-32 BERT over testdata/vocab.txt as a Google bert_config.json; returns its path.

  For tests of the processes and flags around a model (a binary's --bert_config), not of the model: it
  traces, trains and saves in a fraction of the tiny preset's time.
  """
  with open(os.path.join(repo_root(), "testdata", "vocab.txt"), encoding="utf-8") as f:
    vocab_size = len(f.read().splitlines())
  path = os.path.join(directory, "bert_config.json")
  with open(path, "w") as f:
    json.dump(
        {
            "vocab_size": vocab_size,
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": max_position_embeddings
        }, f)
  return path


SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tiny_vocab_tokens() -> List[str]:
  """A tiny uncased WordPiece vocab: the special tokens, a few words, and every lower-case ASCII letter
  and digit alone and as a ## continuation, plus ASCII punctuation, so that any English text
  tokenizes into real pieces (non-ASCII letters become [UNK])."""
  words = ["the", "of", "and", "in", "to", "a", "is", "was", "for", "on", "##s", "##ed", "##ing"]
  singles = list(string.ascii_lowercase + string.digits)
  tokens = SPECIAL_TOKENS + words + singles + ["##" + c for c in singles] + list(string.punctuation)
  seen = set()
  return [t for t in tokens if not (t in seen or seen.add(t))]


def write_vocab(directory: str, tokens: Optional[Sequence[str]] = None, name: str = "vocab.txt") -> str:
  """Writes a vocab file (one token per line; tiny_vocab_tokens() by default) and returns its path."""
  path = os.path.join(directory, name)
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(token + "\n" for token in (tiny_vocab_tokens() if tokens is None else tokens)))
  return path


def testdata_qa_slice(directory: str,
                      num_train: int,
                      num_dev: int,
                      num_docs: int,
                      num_shards: int = 1) -> Dict[str, str]:
  """A small retrieval corpus from testdata holding the gold documents of the first num_train train and
  num_dev dev questions (filled up to num_docs with other documents), written under directory with
  those questions; returns the paths {"corpus": prefix, "train": jsonl, "dev": jsonl}."""
  from realm_tf import tokenization  # pylint: disable=g-import-not-at-top (TensorFlow-heavy)
  from realm_tf.data import corpus  # pylint: disable=g-import-not-at-top
  testdata = os.path.join(repo_root(), "testdata")

  def read(name: str, limit: int) -> List[dict]:
    with open(os.path.join(testdata, name), encoding="utf-8") as f:
      return [json.loads(line) for line in f][:limit]

  train, dev = read("qa.train.jsonl", num_train), read("qa.dev.jsonl", num_dev)
  wanted = {q["doc_id"] for q in train + dev}
  records = read("corpus.jsonl", 300)
  chosen = [r for r in records if r["id"] in wanted]
  chosen += [r for r in records if r["id"] not in wanted][:num_docs - len(chosen)]
  documents = [corpus.Document(r["title"], r["body"], r["id"]) for r in chosen]
  prefix = os.path.join(directory, "corpus", "blocks")
  corpus.write_corpus(lambda: documents,
                      tokenization.Tokenizer(os.path.join(testdata, "vocab.txt")),
                      prefix,
                      num_shards=num_shards)
  paths = {"corpus": prefix}
  for name, questions in (("train", train), ("dev", dev)):
    paths[name] = os.path.join(directory, f"qa.{name}.jsonl")
    with open(paths[name], "w", encoding="utf-8") as f:
      f.write("".join(json.dumps(q) + "\n" for q in questions))
  return paths


def write_small_realm_corpora(directory: str, num_documents: int) -> Dict[str, str]:
  """The first num_documents of testdata's retrieval and pre-training documents as REALM's two corpora
  (one shard each) under directory, for a bin/train_realm run of a few steps; returns
  {"retrieval": blocks prefix, "pretraining": sentences prefix}."""
  from realm_tf import tokenization  # pylint: disable=g-import-not-at-top (TensorFlow-heavy)
  from realm_tf.data import corpus  # pylint: disable=g-import-not-at-top
  from realm_tf.data import pretraining  # pylint: disable=g-import-not-at-top
  testdata = os.path.join(repo_root(), "testdata")
  paths = {
      "retrieval": os.path.join(directory, "blocks"),
      "pretraining": os.path.join(directory, "sentences")
  }
  corpus.write_corpus(
      lambda: list(corpus.read_documents(os.path.join(testdata, "corpus.jsonl")))[:num_documents],
      tokenization.Tokenizer(os.path.join(testdata, "vocab.txt")), paths["retrieval"], 1)
  pretraining.write_pretraining_corpus(
      lambda: list(pretraining.read_raw_documents(os.path.join(testdata, "pretraining.jsonl")))
      [:num_documents], paths["pretraining"], 1)
  return paths


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


@contextlib.contextmanager
def functions_run_eagerly():
  """Inside, every tf.function (training steps, decoding, scores) runs its Python eagerly: no tracing.

  Tracing a training step costs several CPU seconds even on the tests' tiny models, one eager step a
  fraction of a second. For a run of a path that the same test traced already (or whose checks do not
  depend on graph execution), e.g. a restart or a second round; XLA (jit_compile) does not apply inside.
  """
  previous = tf.config.functions_run_eagerly()
  tf.config.run_functions_eagerly(True)
  try:
    yield
  finally:
    tf.config.run_functions_eagerly(previous)


def eagerly(function: Callable) -> Callable:
  """function, run inside functions_run_eagerly() (for mock.patch.object of one phase of a run)."""

  @functools.wraps(function)
  def wrapper(*args, **kwargs):
    with functions_run_eagerly():
      return function(*args, **kwargs)

  return wrapper
