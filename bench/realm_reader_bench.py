r"""Does REALM's reader read, and where does a REALM run move its retriever? (testdata; issue 17)

REALM's retriever learns only from the reader's preference among the retrieved documents: the gradient
on a candidate's score is p(z | x, y) - p(z | x). If the reader predicts a masked fact no better from
the article that states it than from any other article (or from the null document), that preference is
noise or a bias shared by every query, and the retriever drifts. This bench measures both ends:

* the reader: for news statements (one salient fact masked per sentence), the masked fact's
  log-likelihood per wordpiece with the null document, with the subject's own article (the only document
  that states the fact) and with the retriever's top wrong articles; and the own article's recall among
  the 300. "trained": the news items of testdata/pretraining.jsonl, which REALM pre-trains on; "held
  out": the same kind of item about the subjects the dev and test questions ask about, which no training
  text holds (synthetic.all_news_items), so a gain there is a learned skill, not a memorized pairing;
* the retriever: for the 200 dev + test questions, recall@5, the most top-5 lists one document is in
  (hubness) and how much of the change of the question-document scores since the start is the same for
  every question (a per-document shift, which reorders documents for all questions at once).

  .venv/bin/python bench/realm_reader_bench.py --run_dir=RUN --data_dir=SEED_RUN/data \
      --retriever_start=SEED_RUN/ict --reader_start=SEED_RUN/mlm/bert --steps=50,300

RUN is a REALM model directory (its realm_config.json and ckpt-<step>); SEED_RUN a
bench/realm_learning_bench.py seed directory (or bin/demo's output), whose data/ holds the corpus. Step 0
is the start (the ICT retriever and the BERT reader); other steps are REALM checkpoints. Prints a table and
writes JSON to --output.
"""

import json
import os
from typing import Dict, List, Tuple

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

# pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf import evaluation
from realm_tf import io_utils
from realm_tf import retriever_eval
from realm_tf.checkpoints import bert_mapping
from realm_tf.checkpoints import training_state
from realm_tf.data import corpus_table
from realm_tf.data import qa as qa_lib
from realm_tf.data import synthetic
from realm_tf.modeling import realm as realm_model
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import corpus_embedding
from realm_tf.tasks import realm_trainer
# pylint: enable=g-import-not-at-top,wrong-import-position

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_RUN_DIR = flags.DEFINE_string("run_dir", None, "REALM model directory.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "The run's prepared data (its corpus/blocks).")
_RETRIEVER_START = flags.DEFINE_string("retriever_start", None, "The ICT checkpoint REALM started from.")
_READER_START = flags.DEFINE_string("reader_start", None, "The BERT checkpoint the reader started from.")
_STEPS = flags.DEFINE_list("steps", [], "REALM checkpoints to measure besides the start.")
_TESTDATA = flags.DEFINE_string("testdata_dir", os.path.join(_REPO, "testdata"), "testdata/.")
_WRONG = flags.DEFINE_integer("num_wrong", 7, "Wrong articles per statement (REALM's 7 candidates).")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "realm_reader_bench.json"),
                              "JSON results.")

Statement = Tuple[List[int], List[int], List[int], int]  # query ids, mask positions, targets, own row


def _statements(tokenizer, corpus: corpus_table.CorpusTable, news: List[dict]) -> List[Statement]:
  """Each news sentence with its salient fact masked (REALM's salient-span masking) and the corpus row
  of its subject's article, the only article that states the fact."""
  rows = corpus.rows_of([record["doc_id"] for record in news]).tolist()
  missing = [record["doc_id"] for record, row in zip(news, rows) if row < 0]
  if missing:
    raise ValueError(f"{corpus.prefix}: no article for the news subjects {missing[:5]}; pass the "
                     "--data_dir of a run on this testdata (bin/generate_testdata)")
  texts, statement_rows = [], []  # before, the fact and after of each statement, in order
  for record, row in zip(news, rows):
    text = record["text"].encode("utf-8")  # offsets are bytes
    for start, limit in record["sentences"]:
      for a, b in [(a, b) for a, b in record["spans"] if start <= a and b <= limit][-1:]:
        texts += [text[start:a].decode("utf-8"), text[a:b].decode("utf-8"), text[b:limit].decode("utf-8")]
        statement_rows.append(row)
  # Every piece in one tokenizer call (each eager call costs about 0.1 s of CPU); rows are independent.
  pieces = [[int(i) for i in t.ids] for t in tokenizer.tokenize_texts(texts)]
  out = []
  for k, row in enumerate(statement_rows):
    before, targets, after = pieces[3 * k:3 * k + 3]
    query = before + [tokenizer.mask_id] * len(targets) + after
    out.append((query, [1 + len(before) + j for j in range(len(targets))], targets, row))
  return out


def _reader_rows(model, config, featurizer, corpus, doc_embeddings: np.ndarray,
                 statements: List[Statement]) -> Dict[str, float]:
  """Masked-fact log-likelihood with the null document, the own article and the top wrong articles."""
  null, own, wrong, ranks = [], [], [], []
  for query, positions, targets, row in statements:
    query_inputs = featurizer.query_inputs(tf.ragged.constant([query], dtype=tf.int64))
    embedding = model.retriever.embed_queries(tuple(query_inputs), training=False).numpy()[0]
    order = np.argsort(-(doc_embeddings @ embedding))
    ranks.append(int(np.flatnonzero(order == row)[0]))
    others = [int(i) for i in order if i != row][:_WRONG.value]
    docs = [[]] + [corpus.body_token_ids.row(i).tolist() for i in [row] + others]
    bodies = tf.RaggedTensor.from_row_lengths(tf.constant(sum(docs, []), tf.int64), [len(d) for d in docs])
    joint = featurizer.joint_inputs(tf.ragged.constant([query] * len(docs), dtype=tf.int64), bodies)
    n = min(len(targets), config.max_masks)
    mlm_positions = np.zeros([len(docs), config.max_masks], np.int32)
    mlm_targets = np.zeros_like(mlm_positions)
    mlm_positions[:, :n], mlm_targets[:, :n] = positions[:n], targets[:n]
    logits = model.encoder((tuple(joint), tf.constant(mlm_positions)), training=False)
    log_probs = realm_model.gather_target_log_probs(logits, tf.constant(mlm_targets)).numpy()[:, :n]
    per_doc = log_probs.mean(axis=1)
    null.append(per_doc[0])
    own.append(per_doc[1])
    wrong.append(per_doc[2:].mean())
  null, own, wrong, ranks = map(np.asarray, (null, own, wrong, ranks))
  return {
      "statements": len(ranks),
      "log_likelihood_null": float(null.mean()),
      "log_likelihood_own_article": float(own.mean()),
      "log_likelihood_wrong_articles": float(wrong.mean()),
      "own_beats_null": float((own > null).mean()),
      "own_beats_wrong": float((own > wrong).mean()),
      "statement_recall@1": float((ranks < 1).mean() * 100),
      "statement_recall@5": float((ranks < 5).mean() * 100),
      "statement_recall@20": float((ranks < 20).mean() * 100)
  }


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  # Checked here, not by required=True, so the test can import the module under absltest's flags.
  for flag in (_RUN_DIR, _DATA_DIR, _RETRIEVER_START, _READER_START):
    if not flag.value:
      raise app.UsageError(f"--{flag.name} is required (see the module docstring)")
  config = realm_config_lib.RealmConfig.load(_RUN_DIR.value)
  tokenizer = config.tokenizer()
  featurizer = config.featurizer(tokenizer)
  corpus = corpus_table.CorpusTable.load(os.path.join(_DATA_DIR.value, "corpus", "blocks"))
  questions = [
      e for split in ("dev", "test")
      for e in qa_lib.load_jsonl(os.path.join(_TESTDATA.value, f"qa.{split}.jsonl"))
  ]
  asked = {e.metadata["doc_id"] for e in questions}
  news = synthetic.all_news_items()
  statements = {
      "trained": _statements(tokenizer, corpus, [r for r in news if r["doc_id"] not in asked]),
      "held_out": _statements(tokenizer, corpus, [r for r in news if r["doc_id"] in asked])
  }
  gold = corpus.rows_of([e.metadata["doc_id"] for e in questions]).tolist()
  rows, start_scores = [], None
  for step in [0] + [int(s) for s in _STEPS.value]:
    model = realm_trainer.build_model(config)
    if step == 0:
      bert_mapping.load_bert_weights(model.encoder.encoder,
                                     _READER_START.value,
                                     masked_lm=model.encoder.masked_lm,
                                     strict=False)
      training_state.restore_retriever(model.retriever, _RETRIEVER_START.value)
    else:
      path = os.path.join(_RUN_DIR.value, f"ckpt-{step}")
      if not tf.io.gfile.exists(path + ".index"):
        raise FileNotFoundError(f"{path}: no such REALM checkpoint in --run_dir; pass --steps from "
                                f"{tf.train.get_checkpoint_state(_RUN_DIR.value)}")
      tf.train.Checkpoint(model=model).restore(path).expect_partial()
    docs = np.asarray(
        corpus_embedding.embed_corpus(
            lambda inputs, m=model: m.retriever.embed_documents(inputs, training=False),
            corpus.prefix,
            featurizer,
            log=lambda _: None))
    row = {"step": step}
    for name, items in statements.items():
      row[name] = _reader_rows(model, config, featurizer, corpus, docs, items)
    scores = retriever_eval.embed_questions(model.retriever, config, [e.question for e in questions]) @ docs.T
    top5 = np.argsort(-scores, axis=1)[:, :5]
    counts = np.bincount(top5.ravel(), minlength=corpus.num_docs)
    recall = evaluation.rankings_recall(top5,
                                        corpus.texts(), [e.answers for e in questions],
                                        gold_rows=gold,
                                        ks=(5,))
    row.update({
        "question_recall@5": recall["gold_recall@5"],
        "max_top5_lists_of_one_document": int(counts.max()),
        "documents_in_no_top5": int((counts == 0).sum())
    })
    if start_scores is None:
      start_scores = scores
    else:
      change = scores - start_scores
      # The part of the change every question shares: each document's mean change over the questions.
      row["question_independent_share_of_score_change"] = float(change.mean(axis=0).var() / change.var())
    rows.append(row)
    print(json.dumps(row), flush=True)
  print("\n| step | statements | null / own / wrong articles (log-lik. per wordpiece) | own > null | "
        "own > wrong | statement recall@1 / 5 / 20 | question recall@5 | max top-5 lists | "
        "shared share of score change |")
  print("|---|---|---|---|---|---|---|---|---|")
  for r in rows:
    shared = r.get("question_independent_share_of_score_change")
    for name in statements:
      m = r[name]
      print(f"| {r['step']} | {name} ({m['statements']}) | {m['log_likelihood_null']:.2f} / "
            f"{m['log_likelihood_own_article']:.2f} / {m['log_likelihood_wrong_articles']:.2f} | "
            f"{m['own_beats_null']:.2f} | {m['own_beats_wrong']:.2f} | {m['statement_recall@1']:.1f} / "
            f"{m['statement_recall@5']:.1f} / {m['statement_recall@20']:.1f} | "
            f"{r['question_recall@5']:.1f} | {r['max_top5_lists_of_one_document']} | "
            f"{'' if shared is None else f'{shared:.2f}'} |")
  io_utils.write_json_atomic(
      _OUTPUT.value, {
          "run_dir": _RUN_DIR.value,
          "retriever_start": _RETRIEVER_START.value,
          "reader_start": _READER_START.value,
          "rows": rows
      })


if __name__ == "__main__":
  app.run(main)
