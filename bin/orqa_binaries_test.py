"""Runs the ORQA binaries as a user would, as separate processes on testdata: bin/train_orqa (a short run
from an untrained retriever), bin/eval_orqa (metrics JSON, predictions JSONL, the printed table), and a
run whose retriever checkpoint has the wrong hidden size, which must stop with a message that says what
to pass."""

import json
import os
import subprocess
import sys

import tensorflow as tf

from realm_tf import tokenization
from realm_tf.data import corpus as corpus_lib
from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TESTDATA = os.path.join(_REPO, "testdata")
_VOCAB = os.path.join(_TESTDATA, "vocab.txt")


def _run(script, *args, timeout=300):
  env = dict(os.environ, PYTHONPATH=_REPO, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
  return subprocess.run([sys.executable, os.path.join(_REPO, "bin", script), *args],
                        capture_output=True, text=True, env=env, timeout=timeout, check=False)


def _train_flags(model_dir, corpus_prefix, *extra):
  return (f"--model_dir={model_dir}", f"--train_path={_TESTDATA}/qa.train.jsonl",
          f"--dev_path={_TESTDATA}/qa.dev.jsonl", f"--retrieval_corpus_path={corpus_prefix}",
          f"--vocab_path={_VOCAB}", "--bert_config=tiny", "--projection_size=32", "--query_seq_len=32",
          "--candidate_seq_len=128", "--reader_seq_len=128", "--span_hidden_size=32",
          "--retriever_beam_size=50", "--batch_size=4", "--learning_rate=1e-4", "--nojit_compile",
          *extra)


class OrqaBinariesTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tf.compat.v1.test.get_temp_dir()
    cls.corpus = os.path.join(cls.tmp, "corpus", "blocks")
    documents = lambda: corpus_lib.read_documents(os.path.join(_TESTDATA, "corpus.jsonl"))
    corpus_lib.write_corpus(documents, tokenization.Tokenizer(_VOCAB), cls.corpus, num_shards=2)
    cls.model_dir = os.path.join(cls.tmp, "orqa")
    cls.train = _run("train_orqa.py", *_train_flags(
        cls.model_dir, cls.corpus, "--num_train_steps=12", "--eval_every_steps=6",
        "--save_checkpoints_steps=6", "--max_eval_examples=20"))

  def test_train_then_eval(self):
    self.assertEqual(self.train.returncode, 0, self.train.stderr[-3000:])
    self.assertIn("embedded 300 blocks with the document tower", self.train.stderr)
    self.assertIn("trained to step 12", self.train.stderr)
    with open(os.path.join(self.model_dir, "best_metric.json")) as f:
      best = json.load(f)
    self.assertIn(best["step"], (6, 12))
    self.assertEqual(best["metrics"]["num_examples"], 20)

    out = os.path.join(self.tmp, "eval_out")
    result = _run("eval_orqa.py", f"--model_dir={self.model_dir}", f"--qa_path={_TESTDATA}/qa.dev.jsonl",
                  f"--output_dir={out}", "--batch_size=20")
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    with open(os.path.join(out, "qa.dev.metrics.json")) as f:
      metrics = json.load(f)
    for key in ("accuracy", "exact_match", "f1", "recall@1", "recall@5", "recall@20", "recall@100",
                "num_examples", "checkpoint"):
      self.assertIn(key, metrics)
    self.assertEqual(metrics["num_examples"], 100)
    self.assertEqual(metrics["checkpoint"], os.path.join(self.model_dir, best["checkpoint"]))
    # Recall cannot shrink as k grows.
    self.assertLessEqual(metrics["recall@1"], metrics["recall@5"])
    self.assertLessEqual(metrics["recall@20"], metrics["recall@100"])
    with open(os.path.join(out, "qa.dev.predictions.jsonl"), encoding="utf-8") as f:
      records = [json.loads(line) for line in f]
    self.assertLen(records, 100)
    self.assertEqual(records[0]["question"], "Where was Savix Lunene born?")
    self.assertLen(records[0]["retrieved_ids"], 5)
    self.assertIn("recall@100", result.stdout)
    self.assertIn("exact_match", result.stdout)

  def test_export_then_answer(self):
    self.assertEqual(self.train.returncode, 0, self.train.stderr[-3000:])
    export_dir = os.path.join(self.tmp, "export")
    result = _run("export_saved_model.py", f"--model_dir={self.model_dir}", f"--output_dir={export_dir}")
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    for kind in ("query_embedder", "document_embedder", "open_qa"):
      self.assertIn(f"{kind}: {os.path.join(export_dir, kind)}", result.stdout)
      self.assertTrue(os.path.exists(os.path.join(export_dir, kind, "saved_model.pb")))

    result = _run("answer.py", "Where was Savix Lunene born?", "Où est né Zoë?",
                  f"--saved_model={export_dir}/open_qa", "--num_passages=2")
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    lines = result.stdout.splitlines()
    self.assertEqual(lines[0], "Q: Where was Savix Lunene born?")
    self.assertRegex(lines[1], r"^A: .+ \(score -?[0-9.]+\)$")
    self.assertRegex(lines[2], r"^  1\. \[(person|village)-\d{4}\] .+ \(retriever -?[0-9.]+\)$")
    self.assertRegex(lines[4], r"^  2\. \[")
    self.assertIn("Q: Où est né Zoë?", result.stdout)

    result = _run("answer.py", f"--saved_model={export_dir}/open_qa")
    self.assertNotEqual(result.returncode, 0)
    self.assertIn("pass the question(s) after the flags", result.stderr)

  def test_wrong_hidden_size_retriever_is_a_clear_error(self):
    small = embedder_lib.build_retriever(bert.tiny_config(285, hidden_size=32, num_layers=1), 32)
    checkpoint = tf.train.Checkpoint(retriever=small).write(os.path.join(self.tmp, "small", "ckpt-0"))
    model_dir = os.path.join(self.tmp, "wrong")
    result = _run("train_orqa.py", *_train_flags(model_dir, self.corpus, "--num_train_steps=2",
                                                 f"--retriever_checkpoint={checkpoint}"))
    self.assertNotEqual(result.returncode, 0)
    self.assertIn(f"--retriever_checkpoint={checkpoint} does not fit this run's retriever (hidden_size 64",
                  result.stderr)
    self.assertIn("Pass the --bert_config and --projection_size the checkpoint was trained with",
                  result.stderr)
    # Nothing written: a corrected rerun into the same model dir must not meet a stale configuration.
    self.assertFalse(os.path.exists(model_dir) and os.listdir(model_dir))


if __name__ == "__main__":
  tf.test.main()
