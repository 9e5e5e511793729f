"""bench/squad_open_e2e_bench.py's question files on a toy SQuAD pair: train split by article (none of a
held-out article's questions trains), and dev questions naming their paragraph by the corpus's numbering
(what bin/eval_orqa --retriever=gold reads)."""

import json
import os
import tempfile

from absl.testing import absltest
from absl.testing import flagsaver

from bench import squad_open_e2e_bench
from realm_tf.data import qa


def _squad(path, articles):
  """A SQuAD v1.1 file of articles [(title, [[(question, answer), ...] per paragraph])]; each paragraph's
  text holds its answers."""
  data = []
  for title, paragraphs in articles:
    data.append({
        "title":
            title,
        "paragraphs": [{
            "context":
                f"{title} paragraph {i}: " + " ".join(a for _, a in qas),
            "qas": [{
                "id": f"{title}-{i}-{j}",
                "question": q,
                "answers": [{
                    "text": a,
                    "answer_start": 0
                }]
            } for j, (q, a) in enumerate(qas)]
        } for i, qas in enumerate(paragraphs)]
    })
  with open(path, "w", encoding="utf-8") as f:
    json.dump({"version": "1.1", "data": data}, f)


def _read(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


class WriteQuestionsTest(absltest.TestCase):

  def test_split_by_article_and_dev_numbered_after_train(self):
    tmp = tempfile.mkdtemp()
    train_path, dev_path = os.path.join(tmp, "train.json"), os.path.join(tmp, "dev.json")
    _squad(train_path, [
        (f"T{a}", [[(f"q{a}{p}{j}?", f"a{a}{p}{j}") for j in range(2)] for p in range(2)]) for a in range(4)
    ])
    _squad(dev_path, [("D", [[("dq0?", "da0")], [("dq1?", "da1"), ("dq2?", "da2")]])])
    paths = squad_open_e2e_bench.write_questions(train_path, dev_path, os.path.join(tmp, "qa"), 2)

    train, heldout, dev = (_read(paths[name]) for name in ("train", "heldout", "dev"))
    # Every 2nd article (T1, T3) is held out, all its questions; the others train.
    self.assertEqual({r["title"] for r in train}, {"T0", "T2"})
    self.assertEqual({r["title"] for r in heldout}, {"T1", "T3"})
    self.assertLen(train, 8)
    self.assertLen(heldout, 8)
    self.assertNotEqual([r["question"] for r in heldout], sorted(r["question"] for r in heldout),
                        "held-out questions are shuffled, so a prefix spans articles")
    # Train paragraphs are 1..8 in file order; dev's continue at 9, as squad-v1.1-paragraphs.tsv.
    self.assertEqual({r["doc_id"] for r in train if r["title"] == "T2"}, {"5", "6"})
    self.assertEqual([(r["question"], r["doc_id"]) for r in dev], [("dq0?", "9"), ("dq1?", "10"),
                                                                   ("dq2?", "10")])
    # The files are QA files bin/train_orqa and bin/eval_orqa read, doc_id kept in metadata.
    examples = qa.load_qa(paths["dev"])
    self.assertEqual([e.metadata["doc_id"] for e in examples], ["9", "10", "10"])
    self.assertEqual(examples[2].answers, ["da2"])

    # A second call finds the files and writes nothing (the stage is skipped on resume).
    mtime = os.path.getmtime(paths["train"])
    self.assertEqual(squad_open_e2e_bench.write_questions(train_path, dev_path, os.path.join(tmp, "qa"), 2),
                     paths)
    self.assertEqual(os.path.getmtime(paths["train"]), mtime)


class TrainFlagsTest(absltest.TestCase):

  def test_a_bm25_trained_reader_gets_its_own_model_dir_from_the_dense_runs_index(self):
    questions = {"train": "t.jsonl", "heldout": "h.jsonl"}
    dense = squad_open_e2e_bench.train_flags("/w", "/minilm", "/w/corpus/blocks", questions)
    self.assertEqual(dense["model_dir"], "/w/orqa")
    self.assertNotIn("retriever", dense)
    with flagsaver.flagsaver(train_retriever="hybrid", train_hybrid_bm25_weight=0.5):
      hybrid = squad_open_e2e_bench.train_flags("/w", "/minilm", "/w/corpus/blocks", questions)
    self.assertEqual(hybrid["model_dir"], "/w/orqa_hybrid_w0.5")
    self.assertEqual((hybrid["retriever"], hybrid["hybrid_bm25_weight"], hybrid["index_dir"]),
                     ("hybrid", 0.5, "/w/orqa/frozen_index"))
    self.assertEqual(
        {
            k: v
            for k, v in hybrid.items()
            if k not in ("model_dir", "retriever", "hybrid_bm25_weight", "index_dir")
        }, {
            k: v for k, v in dense.items() if k != "model_dir"
        })


class PlotTest(absltest.TestCase):

  def test_plot_is_a_png_of_the_results(self):
    metrics = {"exact_match": 40.0, "f1": 50.0, "recall@1": 60.0, "recall@5": 80.0, "recall@20": 90.0}
    path = os.path.join(tempfile.mkdtemp(), "docs", "e2e.png")
    squad_open_e2e_bench.plot({
        "dense": metrics,
        "bm25": dict(metrics, exact_match=45.0),
        "gold": metrics
    }, path)
    with open(path, "rb") as f:
      self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
  absltest.main()
