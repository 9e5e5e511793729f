"""Retriever recall@k of a realm_tf retriever over a corpus in memory, on QA examples.

Two recalls, as the open-QA papers report them:
  gold document in top-k   when each example names its document (metadata "doc_id", e.g. testdata or
                           SQuAD paragraphs), matched against the corpus doc_id column;
  answer string in top-k   any retrieved document contains an answer (realm_tf.evaluation.has_answer).
Questions are packed as [CLS] question [SEP] (query_seq_len) and embedded with the query tower; the
corpus with the document tower (exact search: recall must not depend on an approximate index).
"""

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import evaluation
from realm_tf.data import corpus_table
from realm_tf.data import qa as qa_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import corpus_embedding
from realm_tf.retrieval import index as index_lib


def embed_questions_with(embed: Callable[[Tuple[tf.Tensor, tf.Tensor, tf.Tensor]], np.ndarray],
                         config: realm_config_lib.RealmConfig,
                         questions: Sequence[str],
                         batch_size: int = 256) -> np.ndarray:
  """float32 [len(questions), D]: questions packed as the run's queries ([CLS] question [SEP], Q
  wordpieces), embedded by `embed` (token ids, mask, segment ids) -> [b, D], e.g. a published index's
  query tower."""
  tokenizer = config.tokenizer()
  featurizer = config.featurizer(tokenizer)
  outputs = []
  for start in range(0, len(questions), batch_size):
    chunk = [q.encode("utf-8") for q in questions[start:start + batch_size]]
    outputs.append(np.asarray(embed(tuple(featurizer.query_inputs(tokenizer.tokenize(chunk))))))
  return np.concatenate(outputs) if outputs else np.zeros([0, config.embedding_dim], np.float32)


def embed_questions(retriever,
                    config: realm_config_lib.RealmConfig,
                    questions: Sequence[str],
                    batch_size: int = 256) -> np.ndarray:
  """float32 [len(questions), D] from the retriever's query tower."""
  return embed_questions_with(lambda inputs: retriever.embed_queries(inputs, training=False).numpy(), config,
                              questions, batch_size)


def dense_top_k(retriever, config: realm_config_lib.RealmConfig, doc_embeddings: np.ndarray,
                questions: Sequence[str], k: int) -> Tuple[np.ndarray, np.ndarray]:
  """(rows int64 [Q, k], scores float32 [Q, k]) of the questions by exact inner-product search of the
  retriever's query embeddings against doc_embeddings."""
  index = index_lib.build_index(doc_embeddings, implementation="brute_force")
  return index.search(embed_questions(retriever, config, list(questions)), k)


def retriever_recall(retriever,
                     config: realm_config_lib.RealmConfig,
                     corpus: corpus_table.CorpusTable,
                     examples: List[qa_lib.QAExample],
                     ks=(1, 5, 20, 100),
                     doc_embeddings: Optional[np.ndarray] = None,
                     doc_retriever=None) -> Dict[str, float]:
  """Recall percentages {"gold_recall@k", "answer_recall@k"} and the number of questions.

  Args:
    retriever: a realm_tf.modeling.embedder.Retriever.
    config: the run's configuration (tokenizer, featurizer).
    corpus: the corpus in memory; row i is index row i.
    examples: the questions; gold recall needs a metadata "doc_id" on every one.
    ks: the k of recall@k (capped at the corpus size).
    doc_embeddings: float32 [N, D] of the document tower, when the caller has them (else embedded here).
    doc_retriever: the Retriever whose document tower embeds the corpus here (default: retriever), e.g.
      another checkpoint's, to tell which tower moved the recall.
  """
  if doc_embeddings is None:
    doc_tower = doc_retriever or retriever
    doc_embeddings = corpus_embedding.embed_corpus(
        lambda inputs: doc_tower.embed_documents(inputs, training=False),
        corpus.prefix,
        config.featurizer(),
        log=lambda _: None)
  max_k = min(max(ks), corpus.num_docs)
  index = index_lib.build_index(doc_embeddings, implementation="brute_force")
  queries = embed_questions(retriever, config, [e.question for e in examples])
  ids, _ = index.search(queries, max_k)
  gold_rows = None
  if examples and all("doc_id" in e.metadata for e in examples):
    gold_rows = corpus.rows_of([e.metadata["doc_id"] for e in examples]).tolist()
  return evaluation.rankings_recall(ids,
                                    corpus.texts(), [e.answers for e in examples],
                                    gold_rows=gold_rows,
                                    ks=ks,
                                    answers_are_regex=[e.answer_is_regex for e in examples])
