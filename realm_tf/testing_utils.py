"""Helpers shared by the tests.

The public data sets the tests read live outside the repository, in ../shared/data (see its README);
bin/test passes their location to Bazel tests as REALM_TF_SHARED_DATA. Tests that need them call
shared_data_dir() and skip when it returns None.
"""

import json
import os
import string
from typing import Dict, List, Optional, Sequence

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


def write_vocab(directory: str, tokens: Optional[Sequence[str]] = None,
                name: str = "vocab.txt") -> str:
  """Writes a vocab file (one token per line; tiny_vocab_tokens() by default) and returns its path."""
  path = os.path.join(directory, name)
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(token + "\n" for token in (tiny_vocab_tokens() if tokens is None else tokens)))
  return path


def testdata_qa_slice(directory: str, num_train: int, num_dev: int, num_docs: int,
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
  corpus.write_corpus(lambda: documents, tokenization.Tokenizer(os.path.join(testdata, "vocab.txt")),
                      prefix, num_shards=num_shards)
  paths = {"corpus": prefix}
  for name, questions in (("train", train), ("dev", dev)):
    paths[name] = os.path.join(directory, f"qa.{name}.jsonl")
    with open(paths[name], "w", encoding="utf-8") as f:
      f.write("".join(json.dumps(q) + "\n" for q in questions))
  return paths


def write_tf1_checkpoint(path: str, variables: Dict[str, np.ndarray]) -> str:
  """A TF1 name-based checkpoint (graph mode, get_variable, tf.compat.v1.train.Saver) holding exactly
  `variables`, as Google's original BERT, REALM and ORQA releases are written; returns its prefix."""
  with tf.compat.v1.Graph().as_default() as graph:
    tf_vars = [tf.compat.v1.get_variable(name, initializer=tf.constant(value))
               for name, value in variables.items()]
    saver = tf.compat.v1.train.Saver(tf_vars)
    with tf.compat.v1.Session(graph=graph) as session:
      session.run(tf.compat.v1.global_variables_initializer())
      return saver.save(session, path, write_meta_graph=False)
