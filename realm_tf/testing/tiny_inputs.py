"""Small inputs written for a test: a BERT config, vocabularies, a slice of the testdata QA file, corpora."""

import json
import os
import string
from typing import Dict, List, Optional, Sequence

from realm_tf.testing import test_paths


def write_small_bert_config(directory: str, max_position_embeddings: int = 128) -> str:
  """A one-layer, hidden-32 BERT over testdata/vocab.txt as a Google bert_config.json; returns its path.

  For tests of the processes and flags around a model (a binary's --bert_config), not of the model: it
  traces, trains and saves in a fraction of the tiny preset's time.
  """
  with open(os.path.join(test_paths.repo_root(), "testdata", "vocab.txt"), encoding="utf-8") as f:
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
  testdata = os.path.join(test_paths.repo_root(), "testdata")

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
  testdata = os.path.join(test_paths.repo_root(), "testdata")
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


def small_realm_config(max_masks: int = 4, num_candidates: int = 4):
  """A REALM configuration over testdata/vocab.txt small enough for a test to train and retrieve with in
  seconds: a one-layer retriever and a two-layer reader of width 32 (bert.tiny_config), projections of
  16, queries of 32 and candidates of 64 wordpieces."""
  # Imported here: the other fixtures of this module need no model code.
  from realm_tf.modeling import bert  # pylint: disable=g-import-not-at-top
  from realm_tf.modeling import realm_config  # pylint: disable=g-import-not-at-top
  return realm_config.RealmConfig(retriever_bert=bert.tiny_config(285, num_layers=1),
                                  reader_bert=bert.tiny_config(285),
                                  vocab_path=os.path.join(test_paths.repo_root(), "testdata", "vocab.txt"),
                                  projection_size=16,
                                  query_seq_len=32,
                                  candidate_seq_len=64,
                                  max_masks=max_masks,
                                  num_candidates=num_candidates)
