"""A bin/train_orqa-style model dir with random weights over the testdata documents: what the export
tests, bin/serve's tests and bench/serve_bench export when they need an open-QA model without training.

The dir holds what orqa_model.load_trained reads (realm_config.json, orqa_config.json, the corpus, the
frozen index, ckpt-1), so it exports exactly as a trained run does; only the answers are arbitrary.
"""

import json
import os
from typing import List, NamedTuple

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import io_utils
from realm_tf import tokenization
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import corpus_table
from realm_tf.modeling import bert
from realm_tf.modeling import orqa as orqa_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import index as index_lib
from realm_tf.runs import frozen_index
from realm_tf.runs import orqa_model
from realm_tf.runs import warm_start
from realm_tf.testing import test_paths

MAX_DOCS = 300  # testdata/corpus.jsonl


class RandomOrqa(NamedTuple):
  model_dir: str
  vocab_path: str  # a copy of testdata/vocab.txt (a test may delete it: the exports carry their own)
  documents: List[corpus_lib.Document]  # row i = block i


def write_model_dir(directory: str, num_docs: int = 40, seed: int = 3) -> RandomOrqa:
  """Writes directory/{vocab_copy.txt, corpus/, orqa/} and returns where; orqa/ is the model dir.

  The BERTs are one-layer hidden-32 towers (seconds to export); the first num_docs testdata documents
  are the corpus."""
  if not 1 <= num_docs <= MAX_DOCS:
    raise ValueError(f"num_docs must be in [1, {MAX_DOCS}] (the testdata corpus), got {num_docs}")
  testdata = os.path.join(test_paths.repo_root(), "testdata")
  os.makedirs(directory, exist_ok=True)
  vocab = os.path.join(directory, "vocab_copy.txt")
  io_utils.copy_atomic(os.path.join(testdata, "vocab.txt"), vocab)
  tokenizer = tokenization.Tokenizer(vocab)
  with open(os.path.join(testdata, "corpus.jsonl"), encoding="utf-8") as f:
    records = [json.loads(line) for line in f][:num_docs]
  documents = [corpus_lib.Document(r["title"], r["body"], r["id"]) for r in records]
  prefix = os.path.join(directory, "corpus", "blocks")
  corpus_lib.write_corpus(lambda: documents, tokenizer, prefix, num_shards=1)
  bert_config = bert.tiny_config(tokenizer.vocab_size, hidden_size=32, num_layers=1, intermediate_size=64)
  config = realm_config_lib.RealmConfig(retriever_bert=bert_config,
                                        reader_bert=bert_config,
                                        vocab_path=vocab,
                                        projection_size=16,
                                        query_seq_len=24,
                                        candidate_seq_len=64,
                                        share_embedders=False)
  orqa = orqa_lib.OrqaConfig(reader_seq_len=96,
                             span_hidden_size=16,
                             max_span_width=6,
                             retriever_beam_size=10,
                             reader_beam_size=3,
                             retrieval_corpus_path=prefix)
  model_dir = os.path.join(directory, "orqa")
  config.save(model_dir)
  orqa.save(model_dir)
  tf_keras.utils.set_random_seed(seed)
  retriever = warm_start.load_retriever_checkpoint(config, None)
  # Random vectors rather than the untrained document tower's: that tower maps these templated documents
  # to near-identical points, and near-ties would make "the same top blocks" depend on float rounding.
  embeddings = np.random.default_rng(seed).normal(size=[num_docs, 16]).astype(np.float32)
  index_lib.build_index(embeddings,
                        implementation="brute_force").save(frozen_index.frozen_index_dir(model_dir))
  blocks = corpus_table.CorpusTable.load(prefix)
  model = orqa_model.build_model(config, orqa, embeddings, blocks, tokenizer)
  orqa_lib.copy_retriever_weights(retriever, model.retriever)
  kernel = model.retriever.query_embedder.projection.kernel  # as if fine-tuning moved the query tower
  kernel.assign(kernel + np.random.default_rng(seed + 1).normal(scale=0.5, size=kernel.shape))
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model), model_dir, 1).save(checkpoint_number=1)
  return RandomOrqa(model_dir, vocab, documents)
