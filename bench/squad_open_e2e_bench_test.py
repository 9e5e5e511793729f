"""bench/squad_open_e2e_bench.py's question files on a toy SQuAD pair: train split by article (none of a
held-out article's questions trains), and dev questions naming their paragraph by the corpus's numbering
(what bin/eval_orqa --retriever=gold reads)."""

import http.server
import json
import os
import tempfile
import threading
from urllib import parse

from absl import app
from absl.testing import absltest
from absl.testing import flagsaver

import numpy as np

from bench import squad_open_e2e_bench
from realm_tf.data import qa
from realm_tf.serving import page
from realm_tf.serving import rest_api


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
    # A slower query tower: its own run, from the same frozen index, the tower's rate passed on.
    with flagsaver.flagsaver(train_retriever="bm25", retriever_learning_rate=1e-5):
      slow = squad_open_e2e_bench.train_flags("/w", "/minilm", "/w/corpus/blocks", questions)
    self.assertEqual(
        (slow["model_dir"], slow["retriever"], slow["retriever_learning_rate"], slow["index_dir"]),
        ("/w/orqa_bm25_qlr1e-05", "bm25", 1e-5, "/w/orqa/frozen_index"))
    with flagsaver.flagsaver(retriever_learning_rate=1e-5):
      slow_dense = squad_open_e2e_bench.train_flags("/w", "/minilm", "/w/corpus/blocks", questions)
    self.assertEqual((slow_dense["model_dir"], slow_dense["index_dir"]),
                     ("/w/orqa_dense_qlr1e-05", "/w/orqa/frozen_index"))
    self.assertNotIn("retriever", slow_dense)
    # A longer run: its own model dir, not the default-length run's checkpoints resumed under its schedule.
    with flagsaver.flagsaver(train_retriever="bm25", retriever_learning_rate=1e-5, num_train_steps=2100):
      longer = squad_open_e2e_bench.train_flags("/w", "/minilm", "/w/corpus/blocks", questions)
    self.assertEqual((longer["model_dir"], longer["num_train_steps"], longer["index_dir"]),
                     ("/w/orqa_bm25_qlr1e-05_steps2100", 2100, "/w/orqa/frozen_index"))
    with flagsaver.flagsaver(num_train_steps=2100):
      longer_dense = squad_open_e2e_bench.train_flags("/w", "/minilm", "/w/corpus/blocks", questions)
    self.assertEqual((longer_dense["model_dir"], longer_dense["index_dir"]),
                     ("/w/orqa_dense_steps2100", "/w/orqa/frozen_index"))
    # A continuation: its own model dir, named after the run it starts from.
    with flagsaver.flagsaver(train_retriever="bm25",
                             retriever_learning_rate=1e-5,
                             num_train_steps=4200,
                             continue_from="bm25_qlr1e-05_steps2100"):
      continued = squad_open_e2e_bench.train_flags("/w", "/minilm", "/w/corpus/blocks", questions)
    self.assertEqual((continued["model_dir"], continued["num_train_steps"]),
                     ("/w/orqa_bm25_qlr1e-05_steps4200_from_bm25_qlr1e-05_steps2100", 4200))


class StartFromRunTest(absltest.TestCase):

  def _finished_run(self, steps=(5, 7)):
    """A model dir as bin/train_orqa leaves it: checkpoints (a variable holding each one's step), the
    best checkpoint and its metric, the summary, the batch size."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    source = self.create_tempdir().full_path
    value = tf.Variable(0.0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=value), source, max_to_keep=2)
    for step in steps:
      value.assign(float(step))
      manager.save(checkpoint_number=step)
    os.makedirs(os.path.join(source, "best"))
    for name, content in (("best_metric.json", '{"value": 37.0}'), ("train_summary.json", "{}"),
                          ("train_state.json", '{"global_batch_size": 8}')):
      with open(os.path.join(source, name), "w", encoding="utf-8") as f:
        f.write(content)
    return source

  def test_the_newest_checkpoint_alone_is_copied_and_restores(self):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    source = self._finished_run()
    model_dir = os.path.join(self.create_tempdir().full_path, "orqa_continued")
    self.assertEqual(squad_open_e2e_bench.start_from_run(source, model_dir), 7)
    # What the finished run selected and summarised is not this run's: bin/train_orqa would otherwise
    # skip training (a summary) or keep the old best against a metric of another retriever.
    self.assertCountEqual(os.listdir(model_dir),
                          ["checkpoint", "train_state.json", "ckpt-7.index", "ckpt-7.data-00000-of-00001"])
    self.assertFalse(os.path.exists(model_dir + ".partial"))
    self.assertEqual(os.path.basename(tf.train.latest_checkpoint(model_dir)), "ckpt-7")
    # What bin/train_orqa's loop asks (realm_tf/training/loop.py): a manager of the directory that lists
    # a checkpoint restores it; one that lists none warm-starts from scratch at step 0.
    restored = tf.Variable(0.0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=restored), model_dir, max_to_keep=2)
    self.assertEqual([os.path.basename(p) for p in manager.checkpoints], ["ckpt-7"])
    self.assertEqual(os.path.basename(manager.restore_or_initialize()), "ckpt-7")
    self.assertEqual(restored.numpy(), 7.0)
    # It is the manager's own: the next saves rotate it out as they would have in the source run.
    for step in (8, 9):
      manager.save(checkpoint_number=step)
    self.assertEqual([os.path.basename(p) for p in manager.checkpoints], ["ckpt-8", "ckpt-9"])
    self.assertFalse(os.path.exists(os.path.join(model_dir, "ckpt-7.index")))
    # Resumed: the model dir is this run's now, left as it is.
    os.remove(os.path.join(model_dir, "train_state.json"))
    self.assertEqual(squad_open_e2e_bench.start_from_run(source, model_dir), 0)
    self.assertFalse(os.path.exists(os.path.join(model_dir, "train_state.json")))

  def test_a_run_without_checkpoints_is_refused_by_name(self):
    source = self.create_tempdir().full_path
    model_dir = os.path.join(self.create_tempdir().full_path, "orqa_continued")
    with self.assertRaisesRegex(app.UsageError, f"--continue_from: no checkpoint in {source}"):
      squad_open_e2e_bench.start_from_run(source, model_dir)
    self.assertFalse(os.path.exists(model_dir))


class _Handler(http.server.BaseHTTPRequestHandler):
  """bin/serve's two endpoints the serve stage reads, answering "ANSWER TO <question>" from one passage,
  with the server's own response and page code."""
  batches = []

  @staticmethod
  def _row(question):
    answer = f"ANSWER TO {question}".encode("utf-8")
    text = b"before " + answer + b" after"
    return dict(answers=answer,
                scores=1.0,
                answer_block_ids=7,
                answer_byte_starts=7,
                answer_byte_limits=7 + len(answer),
                block_ids=[7],
                block_texts=[text],
                block_titles=[b"t"],
                doc_ids=[b"d7"],
                retriever_scores=[0.5])

  def _send(self, body: bytes, content_type: str):
    self.send_response(200)
    self.send_header("Content-Type", content_type)
    self.send_header("Content-Length", str(len(body)))
    self.end_headers()
    self.wfile.write(body)

  def do_POST(self):  # pylint: disable=invalid-name
    questions = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["instances"]
    self.batches.append(questions)
    rows = [self._row(q) for q in questions]
    outputs = {
        k: np.array([r[k] for r in rows], object if k in ("answers",) else None) for k in ("answers", "scores")
    }
    self._send(json.dumps(rest_api.format_predictions(outputs, False, "hybrid")).encode(), "application/json")

  def do_GET(self):  # pylint: disable=invalid-name
    question = parse.parse_qs(parse.urlparse(self.path).query)["q"][0]
    self._send(
        page.render("open_qa", question, self._row(question), 0.1, retriever="hybrid: both").encode(),
        "text/html")

  def log_message(self, *args):
    del args


class ServeStageTest(absltest.TestCase):

  def test_questions_go_in_batches_and_the_page_is_read(self):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    self.addCleanup(server.shutdown)
    questions = [f"q{i} & <x>?" for i in range(5)]
    found = squad_open_e2e_bench.served_answers(f"http://127.0.0.1:{server.server_port}",
                                                "open_qa",
                                                questions,
                                                batch_size=2)
    self.assertEqual([len(b) for b in _Handler.batches], [2, 2, 1])
    self.assertEqual(found["answers"], [f"ANSWER TO {q}" for q in questions])
    self.assertEqual(found["retriever"], "hybrid")
    # The question's "&" and "<" went through the URL and the page's escaping and back.
    self.assertTrue(found["page_shows_answer"])
    self.assertTrue(found["page_marks_answer"])
    self.assertEqual(found["page_retriever"], "hybrid: both")

  def test_agreement_counts_the_questions_both_answered(self):
    path = os.path.join(tempfile.mkdtemp(), "dev.hybrid.predictions.jsonl")
    with open(path, "w", encoding="utf-8") as f:
      for question, prediction in (("a?", "x"), ("b?", "y"), ("c?", "z")):
        f.write(json.dumps({"question": question, "prediction": prediction}) + "\n")
    self.assertEqual(squad_open_e2e_bench.agreement(["x", "other", "w"], path, ["a?", "b?", "d?"]), {
        "compared": 2,
        "same": 1,
        "percent": 50.0
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
