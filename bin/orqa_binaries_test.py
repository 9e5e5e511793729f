"""Runs the ORQA binaries as a user would, as separate processes on testdata: bin/train_orqa (a short run
from an untrained retriever), bin/eval_orqa (metrics JSON, predictions JSONL, the printed table),
bin/export_saved_model and bin/answer (its usage error in this process), and a run whose retriever
checkpoint has the wrong hidden size, which must stop with a message that says what to pass.

The misconfigurations that stop bin/train_orqa before any work run its main() in this process
(realm_tf/testing/in_process: the binary's own flags and wiring, no process start each); one of them runs as a
real process for the exit status and the message on stderr."""

import gc
import json
import os
import subprocess
import sys

from absl import app
import tensorflow as tf

from realm_tf import tokenization
from realm_tf.data import corpus as corpus_lib
from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.testing import in_process
from realm_tf.testing import tiny_inputs

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TESTDATA = os.path.join(_REPO, "testdata")
_VOCAB = os.path.join(_TESTDATA, "vocab.txt")
_NUM_DEV = 20  # the first dev questions bin/eval_orqa evaluates


def setUpModule():
  # The objects of the imports (TensorFlow's millions) out of reach of the garbage collector: every
  # in-process main ends with gc.collect() (realm_tf/testing/in_process, training.loop), which otherwise
  # walks all of them each time. They live as long as the process anyway; what the tests make is still
  # collected.
  gc.freeze()


def _run(script, *args, timeout=300):
  env = dict(os.environ, PYTHONPATH=_REPO, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
  return subprocess.run([sys.executable, os.path.join(_REPO, "bin", script), *args],
                        capture_output=True,
                        text=True,
                        env=env,
                        timeout=timeout,
                        check=False)


def _train_flags(model_dir, corpus_prefix, *extra):
  return (f"--model_dir={model_dir}", f"--train_path={_TESTDATA}/qa.train.jsonl",
          f"--dev_path={_TESTDATA}/qa.dev.jsonl", f"--retrieval_corpus_path={corpus_prefix}",
          f"--vocab_path={_VOCAB}", "--bert_config=tiny", "--projection_size=32", "--query_seq_len=32",
          "--candidate_seq_len=128", "--reader_seq_len=128", "--span_hidden_size=32",
          "--retriever_beam_size=50", "--batch_size=4", "--learning_rate=1e-4", "--nojit_compile", *extra)


def _documents():
  return corpus_lib.read_documents(os.path.join(_TESTDATA, "corpus.jsonl"))


def _write_small_corpus(prefix, vocab=_VOCAB, num_docs=10):
  """The first documents of testdata's corpus: enough for the runs that stop before any embedding."""
  documents = list(_documents())[:num_docs]
  corpus_lib.write_corpus(lambda: documents, tokenization.Tokenizer(vocab), prefix, num_shards=1)
  return prefix


class OrqaBinariesTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tf.compat.v1.test.get_temp_dir()
    cls.corpus = os.path.join(cls.tmp, "corpus", "blocks")
    corpus_lib.write_corpus(_documents, tokenization.Tokenizer(_VOCAB), cls.corpus, num_shards=2)
    # A one-layer BERT from a bert_config.json (the presets: ErrorsBeforeWorkTest's runs): bin/train_orqa,
    # bin/export_saved_model and bin/answer trace and load it faster than the tiny preset's two layers.
    bert_config = tiny_inputs.write_small_bert_config(cls.tmp)
    cls.model_dir = os.path.join(cls.tmp, "orqa")
    cls.train = _run(
        "train_orqa.py",
        *_train_flags(cls.model_dir, cls.corpus, f"--bert_config={bert_config}", "--candidate_seq_len=64",
                      "--reader_seq_len=96", "--num_train_steps=4", "--eval_every_steps=2",
                      "--save_checkpoints_steps=2", "--max_eval_examples=8"))

  def test_train_then_eval(self):
    self.assertEqual(self.train.returncode, 0, self.train.stderr[-3000:])
    self.assertIn("embedded 300 blocks with the document tower", self.train.stderr)
    self.assertIn("trained to step 4", self.train.stderr)
    with open(os.path.join(self.model_dir, "best_metric.json")) as f:
      best = json.load(f)
    self.assertIn(best["step"], (2, 4))
    self.assertEqual(best["metrics"]["num_examples"], 8)

    # The first _NUM_DEV dev questions, as a file of their own: bin/eval_orqa evaluates all of it.
    qa_path = os.path.join(self.tmp, "qa.dev_head.jsonl")
    with open(os.path.join(_TESTDATA, "qa.dev.jsonl"), encoding="utf-8") as f:
      head = f.readlines()[:_NUM_DEV]
    with open(qa_path, "w", encoding="utf-8") as f:
      f.writelines(head)
    out = os.path.join(self.tmp, "eval_out")
    # Every retriever in one run (the model loads once): the dense tower's files keep their names.
    result = _run("eval_orqa.py", f"--model_dir={self.model_dir}", f"--qa_path={qa_path}",
                  f"--output_dir={out}", "--batch_size=8", "--retriever=dense,bm25,hybrid,gold")
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    with open(os.path.join(out, "qa.dev_head.metrics.json")) as f:
      metrics = json.load(f)
    for key in ("accuracy", "exact_match", "f1", "recall@1", "recall@5", "recall@20", "recall@100",
                "num_examples", "checkpoint"):
      self.assertIn(key, metrics)
    self.assertEqual(metrics["num_examples"], _NUM_DEV)
    self.assertEqual(metrics["checkpoint"], os.path.join(self.model_dir, best["checkpoint"]))
    # Recall cannot shrink as k grows, nor the normalized test (case and spacing ignored) find less.
    self.assertLessEqual(metrics["recall@1"], metrics["recall@5"])
    self.assertLessEqual(metrics["recall@5"], metrics["normalized_recall@5"])
    self.assertLessEqual(metrics["recall@20"], metrics["recall@100"])
    with open(os.path.join(out, "qa.dev_head.predictions.jsonl"), encoding="utf-8") as f:
      records = [json.loads(line) for line in f]
    self.assertLen(records, _NUM_DEV)
    self.assertEqual(records[0]["question"], "Where was Savix Lunene born?")
    self.assertLen(records[0]["retrieved_ids"], 5)
    self.assertIn("recall@100", result.stdout)
    self.assertIn("exact_match", result.stdout)

    # The other retrievers: a metrics file each and a row each in the closing table.
    table = result.stdout[result.stdout.index("retriever  exact_match"):].splitlines()
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in table[2:]}
    self.assertEqual(list(rows), ["dense", "bm25", "hybrid", "gold"])
    by_retriever = {"dense": metrics}
    for retriever in ("bm25", "hybrid", "gold"):
      with open(os.path.join(out, f"qa.dev_head.{retriever}.metrics.json")) as f:
        by_retriever[retriever] = json.load(f)
      self.assertEqual(by_retriever[retriever]["retriever"], retriever)
      self.assertEqual(by_retriever[retriever]["num_examples"], _NUM_DEV)
    for retriever, values in rows.items():
      self.assertAlmostEqual(values[0], by_retriever[retriever]["exact_match"], places=2)
      self.assertAlmostEqual(values[3], by_retriever[retriever]["recall@5"], places=2)
    # Each testdata question names its gold document, whose text holds the answer: the gold retriever
    # finds it at k = 1. BM25 on these name-matching questions beats an untrained tower.
    self.assertEqual(by_retriever["gold"]["recall@1"], 100.0)
    self.assertGreater(by_retriever["bm25"]["recall@5"], metrics["recall@5"])
    with open(os.path.join(out, "qa.dev_head.gold.predictions.jsonl"), encoding="utf-8") as f:
      gold = [json.loads(line) for line in f]
    self.assertEqual([r["retrieved_ids"] for r in gold], [[json.loads(line)["doc_id"]] for line in head])

  def test_unknown_retriever_is_an_error_naming_the_flag(self):
    # main() stops before loading anything (there is no model dir here).
    result = in_process.run_main("eval_orqa.py", f"--model_dir={self.tmp}/none", "--qa_path=x.jsonl",
                                 "--retriever=dense,sparse")
    self.assertIsInstance(result.error, app.UsageError)
    self.assertIn("--retriever: unknown retriever 'sparse'; choose from dense, bm25, hybrid, gold",
                  str(result.error))
    result = in_process.run_main("eval_orqa.py", f"--model_dir={self.tmp}/none", "--qa_path=x.jsonl",
                                 "--retriever=hybrid", "--hybrid_bm25_weight=1.5")
    self.assertIsInstance(result.error, app.UsageError)
    self.assertIn("--hybrid_bm25_weight=1.5: the BM25 weight of the hybrid's score sum must be in [0, 1]",
                  str(result.error))
    result = in_process.run_main("eval_orqa.py", f"--model_dir={self.tmp}/none", "--qa_path=x.jsonl",
                                 "--reader_beam_size=0")
    self.assertIn("flag --reader_beam_size=0: 0 is not a positive integer", str(result.error))

  def test_export_then_answer(self):
    self.assertEqual(self.train.returncode, 0, self.train.stderr[-3000:])
    export_dir = os.path.join(self.tmp, "export")
    # Less the token-id twins, which take as long again (realm_tf/export/saved_models_test exports and
    # runs them from a bin/train_orqa-style model dir).
    result = _run("export_saved_model.py", f"--model_dir={self.model_dir}", f"--output_dir={export_dir}",
                  "--notoken_ids")
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

    # No question: a usage error before the model is loaded, through bin/answer's main in this process
    # (the process above is bin/answer's real run; app.run prints such an error and exits non-zero).
    result = in_process.run_main("answer.py", f"--saved_model={export_dir}/open_qa")
    self.assertIsInstance(result.error, app.UsageError)
    self.assertIn("pass the question(s) after the flags", str(result.error))

  def test_wrong_hidden_size_retriever_is_a_clear_error(self):
    small = embedder_lib.build_retriever(bert.tiny_config(285, hidden_size=32, num_layers=1), 32)
    checkpoint = tf.train.Checkpoint(retriever=small).write(os.path.join(self.tmp, "small", "ckpt-0"))
    model_dir = os.path.join(self.tmp, "wrong")
    # bin/train_orqa's main in this process; ErrorsBeforeWorkTest runs such a run as a process.
    result = in_process.run_main(
        "train_orqa.py",
        *_train_flags(model_dir, self.corpus, "--num_train_steps=2", f"--retriever_checkpoint={checkpoint}"))
    self.assertIsInstance(result.error, ValueError)
    self.assertIn(f"--retriever_checkpoint={checkpoint} does not fit this run's retriever (hidden_size 64",
                  str(result.error))
    self.assertIn("Pass the --bert_config and --projection_size the checkpoint was trained with",
                  str(result.error))
    self.assertNotIn("Value in checkpoint could not be found", result.log)
    # Nothing written: a corrected rerun into the same model dir must not meet a stale configuration.
    self.assertFalse(os.path.exists(model_dir) and os.listdir(model_dir))


class ErrorsBeforeWorkTest(tf.test.TestCase):
  """Misconfigurations stop bin/train_orqa before anything is built or written, with an error naming
  the flag or file and the fix: bin/train_orqa's main in this process (in_process.run_main), and one
  real process that must end with that error as the last thing printed."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = os.path.join(tf.compat.v1.test.get_temp_dir(), "errors_before_work")
    os.makedirs(cls.tmp, exist_ok=True)
    with open(_VOCAB, encoding="utf-8") as f:
      tokens = f.read().splitlines()
    # The same size, another content (two tokens swapped); and 5 tokens more.
    swapped = tokens[:-2] + [tokens[-1], tokens[-2]]
    cls.swapped_vocab = os.path.join(cls.tmp, "vocab_swapped.txt")
    cls.bigger_vocab = os.path.join(cls.tmp, "vocab_290.txt")
    bigger = tokens + [f"x{i}" for i in range(5)]
    for path, lines in ((cls.swapped_vocab, swapped), (cls.bigger_vocab, bigger)):
      with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    cls.corpus = _write_small_corpus(os.path.join(cls.tmp, "corpus", "blocks"))
    cls.swapped_corpus = _write_small_corpus(os.path.join(cls.tmp, "corpus_swapped", "blocks"),
                                             cls.swapped_vocab)
    cls.bigger_corpus = _write_small_corpus(os.path.join(cls.tmp, "corpus_290", "blocks"), cls.bigger_vocab)
    # A checkpoint holding more than the retriever (as a REALM or ORQA run's does: reader, optimizer):
    # a failed restore used to bury the error under a warning per unmatched value.
    retriever = embedder_lib.build_retriever(bert.tiny_config(285), 32, share_embedders=False)
    extra = [tf.Variable(tf.zeros([3])) for _ in range(20)]
    cls.full_checkpoint = tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=retriever, extra=extra),
                                              optimizer=tf.train.Checkpoint(slots=extra)).write(
                                                  os.path.join(cls.tmp, "full", "ckpt-3"))

  def _fails_before_work(self, result, model_dir, *parts):
    self.assertIsNotNone(result.error, result.log[-3000:])
    message = str(result.error)
    for part in parts:
      self.assertIn(part, message)
    self.assertNotIn("Value in checkpoint could not be found", result.log)
    self.assertFalse(os.path.exists(model_dir) and os.listdir(model_dir))
    return message

  def _train(self, name, *flags, corpus=None):
    model_dir = os.path.join(self.tmp, name)
    flags = _train_flags(model_dir, corpus or self.corpus, "--num_train_steps=1") + flags
    return model_dir, in_process.run_main("train_orqa.py", *flags)

  def test_unknown_bert_config_preset(self):
    model_dir, result = self._train("preset", "--bert_config=bert_large")
    self._fails_before_work(
        result, model_dir, "unknown --bert_config 'bert_large': presets are tiny, "
        "bert_base, or a path to a bert_config.json / config.json")

  def test_bert_config_file_without_vocab_size(self):
    path = os.path.join(self.tmp, "bc.json")
    with open(path, "w") as f:
      json.dump(
          {
              "hidden_size": 64,
              "num_hidden_layers": 2,
              "num_attention_heads": 2,
              "intermediate_size": 128
          }, f)
    model_dir, result = self._train("no_vocab_size", f"--bert_config={path}")
    self._fails_before_work(
        result, model_dir, f"--bert_config={path}: missing ['vocab_size']",
        "a BERT config (Google's bert_config.json or Hugging Face's config.json) "
        "needs vocab_size")

  def test_vocab_other_than_the_corpus_manifest(self):
    model_dir, result = self._train("other_vocab", f"--vocab_path={self.swapped_vocab}")
    self.assertIsInstance(result.error, corpus_lib.VocabMismatchError)
    self._fails_before_work(result, model_dir, f"the vocab {self.swapped_vocab} (--vocab_path",
                            f"{self.corpus}.manifest.json records vocab_sha256",
                            "regenerate the corpus with bin/generate_retrieval_corpus")

  def test_resumed_run_with_another_vocab_of_the_same_size(self):
    model_dir = os.path.join(self.tmp, "resumed")
    sha = corpus_lib.vocab_sha256(_VOCAB)
    realm_config_lib.RealmConfig(retriever_bert=bert.tiny_config(285),
                                 reader_bert=bert.tiny_config(285),
                                 vocab_path=_VOCAB,
                                 vocab_sha256=sha).save(model_dir)
    flags = _train_flags(model_dir, self.swapped_corpus, "--num_train_steps=1",
                         f"--vocab_path={self.swapped_vocab}")
    result = in_process.run_main("train_orqa.py", *flags)
    self.assertIsInstance(result.error, corpus_lib.VocabMismatchError)
    self.assertIn(
        f"is not the vocab this run was started with ({model_dir}/realm_config.json records "
        f"vocab_sha256 {sha[:16]}", str(result.error))
    self.assertEqual(os.listdir(model_dir), ["realm_config.json"])

  def test_vocab_of_another_size_than_a_full_retriever_checkpoint(self):
    checkpoint = self.full_checkpoint
    model_dir, result = self._train("bigger_vocab",
                                    f"--retriever_checkpoint={checkpoint}",
                                    f"--vocab_path={self.bigger_vocab}",
                                    corpus=self.bigger_corpus)
    self._fails_before_work(
        result, model_dir, f"--retriever_checkpoint={checkpoint} has 285 word "
        "embeddings but this run's retriever BERT has vocab_size 290",
        "pass the --vocab_path and --bert_config the checkpoint was trained with")

  def test_hidden_size_other_than_a_full_retriever_checkpoint_in_a_process(self):
    # A misfit found only by the restore itself (hidden size), as a real process: it exits non-zero with
    # the error as the last line of stderr, no warning per unmatched checkpoint value after it, and
    # nothing written.
    checkpoint = self.full_checkpoint
    path = os.path.join(self.tmp, "bc_h32.json")
    with open(path, "w") as f:
      json.dump(
          {
              "vocab_size": 285,
              "hidden_size": 32,
              "num_hidden_layers": 2,
              "num_attention_heads": 2,
              "intermediate_size": 128,
              "max_position_embeddings": 256
          }, f)
    model_dir = os.path.join(self.tmp, "hidden_32")
    result = _run("train_orqa.py", *_train_flags(model_dir, self.corpus, "--num_train_steps=1"),
                  f"--retriever_checkpoint={checkpoint}", f"--bert_config={path}")
    self.assertNotEqual(result.returncode, 0)
    last = result.stderr.strip().splitlines()[-1]
    self.assertIn(f"--retriever_checkpoint={checkpoint} does not fit this run's retriever (hidden_size 32",
                  last)
    self.assertNotIn("Value in checkpoint could not be found", result.stderr)
    self.assertFalse(os.path.exists(model_dir) and os.listdir(model_dir))


if __name__ == "__main__":
  tf.test.main()
