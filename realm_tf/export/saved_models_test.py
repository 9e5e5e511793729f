"""Tests of the SavedModels: exported from a bin/train_orqa-style model dir, loaded in a FRESH process
after the original vocab file is gone, they give the Python model's answers, retrieved blocks and
embeddings, for a batch holding an empty, a 2000-character and a non-ASCII question: the raw-text models
with plain TensorFlow (+ tensorflow_text, + scann for a ScaNN index) and with saved_model_cli run after
registering those ops; the token-id models with the stock saved_model_cli script.

One fresh process (started once, shared by the cases) loads every model: first the token-id embedders
with saved_model_cli's own run (its TF1 session loader) before any op library is imported (core ops
only), then, after `import tensorflow_text, scann` (what the documented register-the-ops-first command
line does before it calls saved_model_cli's main), open_qa_scann with saved_model_cli's run and the
raw-text models with tf.saved_model.load. One more process runs a command line itself: the stock
saved_model_cli script on open_qa_token_ids."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

import numpy as np
import tensorflow as tf

from realm_tf.data import untuned
from realm_tf.export import loader
from realm_tf.export import saved_models
from realm_tf.retrieval import scann_index
from realm_tf.runs import orqa_evaluation
from realm_tf.runs import orqa_model
from realm_tf.testing import random_orqa

_QUESTIONS = [
    "Where was Savix Lunene born?", "", "What did Wenor found? " * 91, "Où est né Zoë Kelarlé, l'ingénieur?",
    "When was Essan Zoror born?"
]
_NUM_DOCS = 40

# Runs in a fresh interpreter with no realm_tf on the path: the SavedModels must stand alone.
_LOADER = r"""
import json, sys
import numpy as np
import tensorflow as tf
from tensorflow.python.tools import saved_model_cli
paths, questions, titles, bodies, core_cli_runs, cli_runs = json.loads(sys.stdin.read())

def cli_run(path, signature, exprs, outdir):  # what `saved_model_cli run --input_exprs` does
  feed = saved_model_cli.load_inputs_from_input_arg_string("", exprs, "")
  saved_model_cli.run_saved_model_with_feed_dict(path, "serve", signature, feed, outdir, False)

for run in core_cli_runs:  # no op library imported yet: core TensorFlow ops only
  cli_run(*run)
out = {"core_ops_only": not any(name in sys.modules for name in ("tensorflow_text", "scann"))}
import tensorflow_text, scann  # register the tokenizer's and ScaNN's ops
for run in cli_runs:
  cli_run(*run)
for kind, path in paths.items():
  model = tf.saved_model.load(path)
  serve = model.signatures["serving_default"]
  if kind.startswith("open_qa"):
    result = serve(questions=tf.constant(questions))
  elif kind == "query_embedder":
    result = serve(questions=tf.constant(questions))
  else:
    result = serve(titles=tf.constant(titles), bodies=tf.constant(bodies))
  out[kind] = {k: (v.numpy().tolist() if v.dtype != tf.string else
                   [x.decode("utf-8") if isinstance(x, bytes) else [y.decode("utf-8") for y in x]
                    for x in v.numpy().tolist()]) for k, v in result.items()}
print(json.dumps(out))
"""


def _packed(rows, type_ids=None):
  """Client-side BERT packing of wordpiece rows, padded with 0 to the longest: the token-id signatures'
  inputs (no truncation), as Python lists for --input_exprs."""
  width = max(len(r) for r in rows)
  out = {
      "input_word_ids": [r + [0] * (width - len(r)) for r in rows],
      "input_mask": [[1] * len(r) + [0] * (width - len(r)) for r in rows]
  }
  if type_ids is not None:
    out["input_type_ids"] = [t + [0] * (width - len(t)) for t in type_ids]
  return out


def _exprs(inputs):
  """saved_model_cli's --input_exprs for {input key: Python value}."""
  return ";".join(f"{k}={v!r}" for k, v in inputs.items())


def _read_outdir(outdir):
  """The outputs saved_model_cli run wrote to --outdir, as Python values (strings decoded)."""
  out = {}
  for name in os.listdir(outdir):
    value = np.load(os.path.join(outdir, name), allow_pickle=True)
    if value.dtype == object:
      value = np.vectorize(lambda x: x.decode("utf-8"), otypes=[object])(value)
    out[name[:-len(".npy")]] = value.tolist()
  return out


class ExportTest(tf.test.TestCase):

  _loaded = None  # the shared fresh process's outputs (_fresh_process)

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    model_dir, vocab, cls.documents = random_orqa.write_model_dir(cls.tmp, num_docs=_NUM_DOCS)
    trained = cls.trained = orqa_model.load_trained(model_dir)
    predictor = orqa_evaluation.OrqaPredictor(trained.model,
                                              trained.tokenizer,
                                              trained.featurizer,
                                              trained.blocks,
                                              batch_size=len(_QUESTIONS),
                                              num_retrieved=3,
                                              jit_compile=True)  # the SavedModel's answers equal XLA's
    with mock.patch.object(untuned, "untuned", wraps=untuned.untuned) as untune:
      cls.expected = predictor.predict(predictor.featurize(_QUESTIONS))
    cls.untuned_pipelines = untune.call_count
    query_inputs = trained.featurizer.query_inputs(trained.tokenizer.tokenize(_QUESTIONS))
    cls.expected_queries = trained.model.retriever.embed_queries(tuple(query_inputs)).numpy()
    cls.titles = [d.title for d in cls.documents[:4]]
    cls.bodies = [d.body for d in cls.documents[:4]]
    cls.candidate_inputs = trained.featurizer.candidate_inputs(trained.tokenizer.tokenize(cls.titles),
                                                               trained.tokenizer.tokenize(cls.bodies))
    cls.expected_documents = trained.model.retriever.embed_documents(tuple(cls.candidate_inputs)).numpy()
    # What a client's BERT tokenizer sends to the token-id models.
    tokenizer = trained.tokenizer
    cls.question_ids = _packed(
        [[tokenizer.cls_id] + q + [tokenizer.sep_id] for q in tokenizer.tokenize(_QUESTIONS).to_list()])
    titles, bodies = tokenizer.tokenize(cls.titles).to_list(), tokenizer.tokenize(cls.bodies).to_list()
    cls.document_ids = _packed(
        [[tokenizer.cls_id] + t + [tokenizer.sep_id] + b + [tokenizer.sep_id] for t, b in zip(titles, bodies)
        ], [[0] * (len(t) + 2) + [1] * (len(b) + 1) for t, b in zip(titles, bodies)])

    export_dir = os.path.join(cls.tmp, "export")
    cls.paths = saved_models.export_all(model_dir, export_dir, log=lambda _: None)
    cls.paths["open_qa_scann"] = saved_models.export_open_qa(trained,
                                                             os.path.join(export_dir, "open_qa_scann"),
                                                             index="scann",
                                                             scann_options=scann_index.ScannOptions(
                                                                 tree_min_docs=10,
                                                                 num_leaves=4,
                                                                 num_leaves_to_search=4,
                                                                 num_candidates=_NUM_DOCS))
    os.remove(vocab)  # the SavedModels carry it as an asset

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()

  def _check_open_qa(self, qa, kind):
    expected, documents = self.expected, self.documents
    with self.subTest(kind):
      self.assertEqual(qa["answers"], list(expected["answer"]))
      self.assertAllEqual(qa["block_ids"], expected["block_rows"])
      self.assertAllClose(qa["scores"], expected["score"], rtol=1e-4, atol=1e-4)
      self.assertAllClose(qa["retriever_scores"], expected["retriever_logits"], rtol=1e-4, atol=1e-4)
      self.assertEqual(qa["doc_ids"][0], [documents[r].doc_id for r in expected["block_rows"][0]])
      self.assertEqual(qa["block_texts"][3], [documents[r].body for r in expected["block_rows"][3]])

  def _check_answer_spans(self, qa):
    self.assertAllEqual(qa["answer_block_ids"], self.expected["predicted_row"])
    self.assertIn(-1, qa["answer_byte_starts"])  # the empty question has no answer
    for i, answer in enumerate(qa["answers"]):
      body = self.documents[self.expected["predicted_row"][i]].body.encode("utf-8")
      start, limit = qa["answer_byte_starts"][i], qa["answer_byte_limits"][i]
      self.assertEqual(body[start:limit].decode("utf-8") if start >= 0 else "", answer)
      self.assertEqual(start < 0, limit < 0)

  @classmethod
  def _fresh_process(cls):
    """The shared fresh process's outputs: {kind: outputs} of tf.saved_model.load, and under "cli" the
    saved_model_cli runs' {kind: outputs} (its core-ops part's flag under "core_ops_only")."""
    if cls._loaded is None:
      paths = {kind: path for kind, path in cls.paths.items() if not kind.endswith("_token_ids")}
      outdirs = {
          kind: tempfile.mkdtemp(dir=cls.tmp)
          for kind in ("query_embedder_token_ids", "document_embedder_token_ids", "open_qa_scann")
      }
      core_cli_runs = [[
          cls.paths["query_embedder_token_ids"], "serving_token_ids",
          _exprs(cls.question_ids), outdirs["query_embedder_token_ids"]
      ],
                       [
                           cls.paths["document_embedder_token_ids"], "serving_default",
                           _exprs(cls.document_ids), outdirs["document_embedder_token_ids"]
                       ]]
      # The raw-text model that needs both op libraries (open_qa, tokenizer ops only, loads with
      # tf.saved_model.load below).
      cli_runs = [[
          cls.paths["open_qa_scann"], "serving_default",
          _exprs({"questions": _QUESTIONS}), outdirs["open_qa_scann"]
      ]]
      loaded = subprocess.run([sys.executable, "-c", _LOADER],
                              input=json.dumps(
                                  [paths, _QUESTIONS, cls.titles, cls.bodies, core_cli_runs, cli_runs]),
                              capture_output=True,
                              text=True,
                              timeout=300,
                              check=False,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=""),
                              cwd=cls.tmp)
      if loaded.returncode != 0:
        raise AssertionError(f"the fresh process failed: {loaded.stderr[-3000:]}")
      cls._loaded = json.loads(loaded.stdout.strip().splitlines()[-1])
      cls._loaded["cli"] = {kind: _read_outdir(outdir) for kind, outdir in outdirs.items()}
    return cls._loaded

  def _stock_cli(self, command, path, signature, inputs):
    """Runs `saved_model_cli run` (command: the stock script) in a fresh process and returns its outputs
    (read back from --outdir) as Python values."""
    outdir = tempfile.mkdtemp(dir=self.tmp)
    run = subprocess.run(command + [
        "run", "--dir", path, "--tag_set", "serve", "--signature_def", signature, "--input_exprs",
        _exprs(inputs), "--outdir", outdir
    ],
                         capture_output=True,
                         text=True,
                         timeout=300,
                         check=False,
                         cwd=self.tmp,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=""))
    self.assertEqual(run.returncode, 0, run.stderr[-3000:])
    return _read_outdir(outdir)

  def test_the_predictor_reads_its_questions_untuned(self):
    # bin/eval_orqa's pass over 10,570 questions ends in the iterator's deletion: autotuned, it could stall
    # up to a minute (realm_tf.data.untuned).
    self.assertEqual(self.untuned_pipelines, 1)

  def test_fresh_process_matches_python_model(self):
    paths, trained = dict(self.paths), self.trained
    self.assertEqual(
        set(paths) - {"open_qa_scann"}, {
            "query_embedder", "document_embedder", "open_qa", "query_embedder_token_ids",
            "document_embedder_token_ids", "open_qa_token_ids"
        })
    self.assertEqual(loader.export_info(paths["open_qa_scann"])["scann_parameters"]["mode"], "tree_ah")
    self.assertEqual(loader.export_info(paths["open_qa"])["checkpoint"], trained.checkpoint)
    with self.assertRaises(FileExistsError):
      saved_models.export_open_qa(trained, paths["open_qa"])

    out = self._fresh_process()

    for kind in ("open_qa", "open_qa_scann"):
      self._check_open_qa(out[kind], kind)
    # Every answer is a slice of the block it came from, accents included, at the bytes the model names.
    for kind in ("open_qa", "open_qa_scann"):
      self._check_answer_spans(out[kind])
    self.assertAllClose(out["query_embedder"]["embeddings"], self.expected_queries, atol=1e-5)
    # The document embedder is the model's (frozen) document tower, not the query tower.
    self.assertAllClose(out["document_embedder"]["embeddings"], self.expected_documents, atol=1e-5)
    self.assertNotAllClose(self.expected_documents,
                           trained.model.retriever.embed_queries(tuple(self.candidate_inputs)).numpy())

  def test_stock_saved_model_cli_runs_token_id_exports(self):
    # The embedders: saved_model_cli's run in the fresh process, before any op library was imported.
    cli_runs = self._fresh_process()
    self.assertTrue(cli_runs["core_ops_only"])
    queries = cli_runs["cli"]["query_embedder_token_ids"]
    self.assertAllClose(queries["embeddings"], self.expected_queries, atol=1e-5)
    documents = cli_runs["cli"]["document_embedder_token_ids"]
    self.assertAllClose(documents["embeddings"], self.expected_documents, atol=1e-5)

    # open_qa_token_ids (the module docstring's command) with the stock script itself.
    cli = [os.path.join(os.path.dirname(sys.executable), "saved_model_cli")]
    qa = self._stock_cli(cli, self.paths["open_qa_token_ids"], "serving_token_ids", self.question_ids)
    self._check_open_qa(qa, "open_qa_token_ids")
    self._check_answer_spans(qa)
    expected = self.expected
    for i in range(len(qa["answers"])):
      first, last = expected["first_piece"][i], expected["last_piece"][i]
      width = last - first + 1 if first >= 0 else 0
      block = self.trained.blocks.dense_bodies(
          self.trained.orqa.max_block_len)[0][expected["predicted_row"][i]]
      self.assertEqual(qa["answer_token_ids"][i][:width], block[first:last + 1].tolist())
      self.assertFalse(any(qa["answer_token_ids"][i][width:]))
    info = loader.export_info(self.paths["open_qa_token_ids"])
    self.assertEqual(info["kind"], "open_qa_token_ids")
    self.assertTrue(os.path.exists(os.path.join(self.paths["open_qa_token_ids"], info["vocab"])))

  def test_raw_text_exports_run_with_saved_model_cli_after_registering_ops(self):
    # open_qa_scann (both op libraries) with saved_model_cli's run in the fresh process, after the
    # imports the documented command line makes (its entry point, saved_model_cli's main, runs as the
    # stock script in test_stock_saved_model_cli_runs_token_id_exports).
    qa = self._fresh_process()["cli"]["open_qa_scann"]
    self._check_open_qa(qa, "open_qa_scann")
    self._check_answer_spans(qa)


if __name__ == "__main__":
  tf.test.main()
