"""Google's released ORQA, served, end to end as a user would run it, on miniature released files that the
test writes in the original TF1 layout (released_weights.released_orqa_weights; a BERT with a 64-position
table, smaller than the original lengths 64/288/320 need): bin/convert_checkpoint.py converts the ORQA
checkpoint and the block_emb with its blocks.tfr / titles.tfr, bin/export_saved_model.py writes the
open-QA SavedModel from the two, and its answers (as bin/answer.py and bin/serve.py get them) must be
spans of retrieved blocks, which must be the converted index's exact top-k for the exported query
tower's embedding.

The ORQA checkpoint's conversion is a real process; the block_emb conversion, the export and bin/answer.py run
their main() in this process (realm_tf/testing/in_process; bin/export_saved_model and bin/answer run as
processes in bin/orqa_binaries_test, and the export is loaded in fresh processes by
realm_tf/export/saved_models_test and bin/serve_test), and the exported models are loaded here once for all
cases."""

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from unittest import mock

import numpy as np
import tensorflow as tf

from realm_tf.export import loader
from realm_tf.export import saved_models
from realm_tf.modeling import bert
from realm_tf.retrieval import index as index_lib
from realm_tf.testing import in_process
from realm_tf.testing import released_weights

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TESTDATA = os.path.join(_REPO, "testdata")
_POSITIONS = 64
# One layer: the conversion maps every layer alike (realm_tf/conversion/released_conversion_test converts
# several), and the export traces and loads a one-layer BERT faster.
_CONFIG = bert.BertConfig(vocab_size=285,
                          hidden_size=32,
                          num_layers=1,
                          num_attention_heads=2,
                          intermediate_size=64,
                          max_position_embeddings=_POSITIONS)  # testdata vocab
_PROJECTION = 16
_SPAN_HIDDEN = 8
_NUM_BLOCKS = 24
_READER_BEAM = 5  # the original's reader_beam_size
_QUESTIONS = [
    "Where was Savix Lunene born?", "Who founded the Kelarlé Workshop?", "When was Essix first recorded?"
]


def _run(script, *args, timeout=300):
  env = dict(os.environ, PYTHONPATH=_REPO, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
  return subprocess.run([sys.executable, os.path.join(_REPO, "bin", script), *args],
                        capture_output=True,
                        text=True,
                        env=env,
                        timeout=timeout,
                        check=False)


def _write_strings(path, values):
  with tf.io.TFRecordWriter(path) as writer:  # ORQA's blocks.tfr / titles.tfr: raw strings
    for value in values:
      writer.write(value.encode("utf-8"))


class ReleasedOrqaTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    tmp = tf.compat.v1.test.get_temp_dir()
    release = os.path.join(tmp, "release")
    for directory in ("orqa_nq_model_from_realm", os.path.join("embedder", "encoded")):
      os.makedirs(os.path.join(release, directory))
    cls.checkpoint = released_weights.write_tf1_checkpoint(
        os.path.join(release, "orqa_nq_model_from_realm", "model.ckpt-300000"),
        released_weights.with_optimizer_slots(
            released_weights.released_orqa_weights(_CONFIG, _PROJECTION, _SPAN_HIDDEN)))
    # Random block embeddings: no near-ties, so the exact top-k is one well-defined list.
    cls.block_emb = np.random.default_rng(7).normal(size=[_NUM_BLOCKS, _PROJECTION]).astype(np.float32)
    encoded = released_weights.write_tf1_checkpoint(
        os.path.join(release, "embedder", "encoded", "encoded.ckpt"), {"block_emb": cls.block_emb})
    with open(os.path.join(_TESTDATA, "corpus.jsonl"), encoding="utf-8") as f:
      records = [json.loads(line) for line in f][:_NUM_BLOCKS]
    cls.texts = [r["body"] for r in records]
    blocks_path, titles_path = (os.path.join(release, name) for name in ("blocks.tfr", "titles.tfr"))
    _write_strings(blocks_path, cls.texts)
    cls.titles = [r["title"] for r in records]
    _write_strings(titles_path, cls.titles)

    cls.orqa_dir, cls.index_dir = os.path.join(tmp, "conv", "orqa_nq"), os.path.join(tmp, "conv", "wiki")
    cls.export_dir = os.path.join(tmp, "export")
    cls.convert_orqa = _run("convert_checkpoint.py", f"--input_checkpoint={cls.checkpoint}",
                            f"--vocab_path={_TESTDATA}/vocab.txt", f"--output_dir={cls.orqa_dir}",
                            "--num_attention_heads=2")
    with contextlib.redirect_stdout(io.StringIO()):  # its conversion report
      cls.convert_index = in_process.run_main("convert_checkpoint.py", "--layout=block_emb",
                                              f"--input_checkpoint={encoded}", f"--blocks_path={blocks_path}",
                                              f"--titles_path={titles_path}",
                                              "--index_implementation=brute_force",
                                              f"--output_dir={cls.index_dir}")
    # README's command (less the token-id twins, which take time and are tested elsewhere), its main in
    # this process: what it prints is its stdout.
    cls.export_stdout = io.StringIO()
    with contextlib.redirect_stdout(cls.export_stdout):
      cls.export = in_process.run_main("export_saved_model.py", f"--model_dir={cls.orqa_dir}",
                                       f"--index_dir={cls.index_dir}", f"--output_dir={cls.export_dir}",
                                       "--notoken_ids")
    cls._query_embedder = cls._open_qa = None

  @classmethod
  def _open_qa_model(cls):
    """The exported open-QA model, loaded once for all cases."""
    if cls._open_qa is None:
      cls._open_qa = loader.load_open_qa(os.path.join(cls.export_dir, "open_qa"))
    return cls._open_qa

  @classmethod
  def _embed_queries(cls, questions):
    """The exported query tower's embeddings (the SavedModel loaded once, for all cases)."""
    if cls._query_embedder is None:
      cls._query_embedder = loader.load_saved_model(os.path.join(cls.export_dir, "query_embedder"))
    return cls._query_embedder.signatures["serving_default"](
        questions=tf.constant(questions))["embeddings"].numpy()

  def test_converted_lengths_fit_the_position_table(self):
    self.assertEqual(self.convert_orqa.returncode, 0, self.convert_orqa.stderr[-3000:])
    self.assertIn("layout orqa_from_realm", self.convert_orqa.stdout)
    # Not REALM's 96/288 nor ORQA's 64/288/320: the table holds 64 positions. (A longer
    # --reader_seq_len is refused: released_conversion_test.)
    self.assertIn("sequence lengths: query_seq_len 64, candidate_seq_len 64, reader_seq_len 64",
                  self.convert_orqa.stdout)

  def test_export_answers_from_the_converted_index(self):
    self.assertIsNone(self.convert_index.error, self.convert_index.traceback)
    self.assertIsNone(self.export.error, self.export.traceback)
    printed = self.export_stdout.getvalue()
    for kind in ("query_embedder", "open_qa"):
      self.assertIn(f"{kind}: {os.path.join(self.export_dir, kind)}", printed)
    # The released blocks were embedded by REALM's embedder, which the ORQA checkpoint does not hold.
    self.assertNotIn("document_embedder", printed)

    # What bin/answer.py and bin/serve.py call (bin/orqa_binaries_test and bin/serve_test run them).
    outputs = loader.answer_questions(self._open_qa_model(), _QUESTIONS)
    queries = self._embed_queries(_QUESTIONS)
    mips = index_lib.load_index(os.path.join(self.index_dir, "mips"))
    top_ids, top_scores = mips.search(queries, k=_READER_BEAM)
    exact = np.argsort(-(queries.astype(np.float64) @ self.block_emb.T.astype(np.float64)), axis=1)
    self.assertAllEqual(exact[:, :_READER_BEAM], top_ids)  # the converted index is the block_emb
    self.assertAllEqual(top_ids, outputs["block_ids"])
    self.assertAllClose(top_scores, outputs["retriever_scores"], atol=1e-4, rtol=1e-4)
    for i, question in enumerate(_QUESTIONS):
      ids = outputs["block_ids"][i]
      self.assertEqual([t.decode("utf-8") for t in outputs["block_texts"][i]], [self.texts[j] for j in ids])
      self.assertEqual([d.decode() for d in outputs["doc_ids"][i]], [str(j) for j in ids])
      answer = outputs["answers"][i]
      self.assertNotEmpty(answer, question)
      row = outputs["answer_block_ids"][i]
      self.assertIn(row, ids)
      start, limit = outputs["answer_byte_starts"][i], outputs["answer_byte_limits"][i]
      self.assertEqual(self.texts[row].encode("utf-8")[start:limit], answer, question)

  def test_answer_binary_answers_from_the_export(self):
    """README's last step: bin/answer.py prints the answer (a span of one of the retrieved blocks) and
    the blocks, titled as in titles.tfr, in the converted index's exact order.

    Its main runs in this process on the model loaded once here (its load_open_qa of that path returns
    it): loading the export in a fresh process is realm_tf/export/saved_models_test's and
    bin/serve_test's, bin/answer.py as a process bin/orqa_binaries_test's."""
    self.assertIsNone(self.export.error, self.export.traceback)
    question = _QUESTIONS[0]
    path = os.path.join(self.export_dir, "open_qa")
    model, loaded = self._open_qa_model(), []

    def load_open_qa(saved_model):
      loaded.append(saved_model)
      return model

    stdout = io.StringIO()
    with mock.patch.object(loader, "load_open_qa", load_open_qa), \
        contextlib.redirect_stdout(stdout):
      answered = in_process.run_main("answer.py", question, f"--saved_model={path}",
                                     f"--num_passages={_READER_BEAM}")
    self.assertIsNone(answered.error, answered.traceback)
    self.assertEqual(loaded, [path])
    lines = stdout.getvalue().splitlines()
    self.assertEqual(f"Q: {question}", lines[0])
    answer = re.fullmatch(r"A: (.*)    \(score -?[0-9.]+\)", lines[1]).group(1)
    passages = [re.match(r"  \d+\. \[(\d+)\] (.*) \(retriever", line) for line in lines[2:]]
    ranked = [(int(m.group(1)), m.group(2)) for m in passages if m]
    query = self._embed_queries([question])[0]
    exact = np.argsort(-(self.block_emb.astype(np.float64) @ query.astype(np.float64)))
    self.assertEqual([j for j, _ in ranked], list(exact[:_READER_BEAM]))
    self.assertEqual([title for _, title in ranked], [self.titles[j] for j, _ in ranked])
    self.assertNotEmpty(answer)
    self.assertTrue(any(answer in self.texts[j] for j, _ in ranked), answer)

  def test_index_dir_without_blocks_is_a_clear_error(self):
    self.assertEqual(self.convert_orqa.returncode, 0, self.convert_orqa.stderr[-3000:])
    bare = os.path.join(os.path.dirname(self.index_dir), "no_blocks")
    index_lib.build_index(self.block_emb, implementation="brute_force").save(os.path.join(bare, "mips"))
    # In-process (bin/export_saved_model prints the same message): it stops before building anything.
    with self.assertRaisesRegex(
        FileNotFoundError, f"{bare} has no blocks.jsonl: the open-QA model "
        "needs the block texts; convert the block_emb again with "
        "--blocks_path="):
      saved_models.export_all(self.orqa_dir, f"{self.export_dir}_bare", index_dir=bare)
    with self.assertRaisesRegex(
        ValueError, r"holds converted block embeddings \(an index\), not a "
        r"model: pass it as index_dir \(--index_dir\)"):
      saved_models.export_all(self.index_dir, f"{self.export_dir}_bare", index_dir=self.index_dir)
    with self.assertRaisesRegex(
        ValueError, r"index_dir \(--index_dir=.*\) is for a converted ORQA "
        r"checkpoint .*A bin/train_orqa run carries its own index"):
      saved_models.export_all(bare, f"{self.export_dir}_bare", index_dir=bare)


if __name__ == "__main__":
  tf.test.main()
