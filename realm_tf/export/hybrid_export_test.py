"""Tests of open_qa exports that retrieve by BM25 or the hybrid (bin/export_saved_model --retriever): once
the run's model dir, corpus and vocab are deleted, a fresh process without realm_tf loads them and its
retrieved blocks equal a numpy reference from the same weights and texts (BM25 scores of the wordpieces,
the query tower's inner products, fusion.reciprocal_rank_fusion); the token-id twin with core ops only.
bin/serve's service names the retriever in its REST answers, metadata and page; a bad --retriever is
refused naming the flag."""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

import numpy as np
import tensorflow as tf

from realm_tf.data import corpus as corpus_lib
from realm_tf.export import loader
from realm_tf.export import saved_models
from realm_tf.retrieval import fusion
from realm_tf.retrieval import hybrid
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import index_update
from realm_tf.retrieval import sparse_in_graph
from realm_tf.runs import frozen_index
from realm_tf.runs import orqa_model
from realm_tf.serving import page
from realm_tf.serving import rest_api
from realm_tf.serving import server
from realm_tf.testing import in_process
from realm_tf.testing import random_orqa

_WEIGHTED = "hybrid_w0.3_token_ids"
_QUESTIONS = [
    "Where was Savix Lunene born?", "Essix village river", "", "When did Wenor found the Kelarle Workshop?",
    "Où est né Zoë Kelarlé, l'ingénieur?"
]

# Runs with no realm_tf on the path, after the corpus files are gone: the twin first, before any op
# library is imported (core TensorFlow ops only), then the raw-text models after tensorflow_text.
_LOADER = r"""
import json, sys
import tensorflow as tf
paths, questions, ids, mask = json.loads(sys.stdin.read())
out = {}
for kind, path in paths.items():
  if kind.endswith("_token_ids"):
    result = tf.saved_model.load(path).signatures["serving_token_ids"](
        input_word_ids=tf.constant(ids, tf.int32), input_mask=tf.constant(mask, tf.int32))
    out[kind] = result["block_ids"].numpy().tolist()
out["core_ops_only"] = "tensorflow_text" not in sys.modules
import tensorflow_text
for kind, path in paths.items():
  if not kind.endswith("_token_ids"):
    result = tf.saved_model.load(path).signatures["serving_default"](questions=tf.constant(questions))
    out[kind] = result["block_ids"].numpy().tolist()
print(json.dumps(out))
"""


class HybridExportTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    made = random_orqa.write_model_dir(os.path.join(cls.tmp, "run"), num_docs=40)
    trained = orqa_model.load_trained(made.model_dir)
    tokenizer = trained.tokenizer
    export_dir = os.path.join(cls.tmp, "export")
    cls.paths = {}
    # The raw-text and the token-id signature share the retrieval code: bm25's twin alone (each export
    # loaded costs seconds).
    for retriever in (hybrid.BM25, hybrid.HYBRID):
      sparse = saved_models.build_sparse(trained, retriever)
      if retriever == hybrid.HYBRID:
        cls.paths[retriever] = saved_models.export_open_qa(trained,
                                                           os.path.join(export_dir, retriever),
                                                           retriever=retriever,
                                                           sparse=sparse)
      twin = retriever + loader.TOKEN_IDS_SUFFIX
      cls.paths[twin] = saved_models.export_open_qa_token_ids(trained,
                                                              os.path.join(export_dir, twin),
                                                              log=lambda _: None,
                                                              retriever=retriever,
                                                              sparse=sparse)
    # The weighted hybrid (--hybrid_bm25_weight=0.3), in its twin: the same retrieval code as the raw text.
    cls.paths[_WEIGHTED] = saved_models.export_open_qa_token_ids(trained,
                                                                 os.path.join(export_dir, _WEIGHTED),
                                                                 log=lambda _: None,
                                                                 retriever=hybrid.HYBRID,
                                                                 sparse=sparse,
                                                                 bm25_weight=0.3)

    # The reference, in numpy from the same weights and texts.
    pieces = tokenizer.tokenize(_QUESTIONS).to_list()
    reference = sparse_in_graph.WordpieceBm25(
        sparse_in_graph.tokenized_documents(tokenizer, [d.title for d in made.documents],
                                            [d.body for d in made.documents]),
        sparse_in_graph.term_map(tokenizer.vocab))
    beam, num_docs = trained.model.reader_beam, len(made.documents)
    cls.expected_bm25 = reference.search(pieces, beam)[0]
    query = trained.model.retriever.embed_queries(
        tuple(trained.featurizer.query_inputs(tokenizer.tokenize(_QUESTIONS)))).numpy()
    dense_scores = query @ trained.model.corpus.embeddings.numpy().T
    dense_rows = np.argsort(-dense_scores, axis=1, kind="stable")[:, :num_docs]
    bm25_rows, bm25_scores = reference.search(pieces, num_docs)
    cls.expected_hybrid = fusion.reciprocal_rank_fusion(
        [hybrid.unmatched_as_padding(bm25_rows, bm25_scores), dense_rows], beam)
    # The graph sums float32 scores, as the reference here does.
    cls.expected_weighted = fusion.weighted_score_fusion(
        [hybrid.unmatched_as_padding(bm25_rows, bm25_scores), dense_rows],
        [np.float32(bm25_scores),
         np.float32(np.take_along_axis(dense_scores, dense_rows, 1))], [0.3, 0.7], beam)
    width = max(len(p) for p in pieces) + 2
    packed = [[tokenizer.cls_id] + p + [tokenizer.sep_id] for p in pieces]
    cls.ids = [p + [0] * (width - len(p)) for p in packed]
    cls.mask = [[1] * len(p) + [0] * (width - len(p)) for p in packed]
    # No corpus, vocab or model dir where the exports are loaded: they carry what they need.
    shutil.rmtree(os.path.join(cls.tmp, "run"))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()

  def test_fresh_process_retrieves_as_the_reference(self):
    result = subprocess.run([sys.executable, "-c", _LOADER],
                            input=json.dumps([self.paths, _QUESTIONS, self.ids, self.mask]),
                            capture_output=True,
                            text=True,
                            timeout=300,
                            check=False,
                            cwd=self.tmp,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=""))
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    out = json.loads(result.stdout.strip().splitlines()[-1])
    self.assertTrue(out["core_ops_only"])
    for kind, expected in (("bm25_token_ids", self.expected_bm25), ("hybrid", self.expected_hybrid),
                           ("hybrid_token_ids", self.expected_hybrid), (_WEIGHTED, self.expected_weighted)):
      with self.subTest(kind):
        self.assertAllEqual(expected, out[kind])
    # The empty question has no BM25 term: every score 0, so the first rows; the hybrid still fuses
    # the dense ranking, so it differs from BM25's.
    self.assertAllEqual([0, 1, 2], out["bm25_token_ids"][2])
    self.assertNotAllEqual(self.expected_bm25, self.expected_hybrid)
    self.assertNotAllEqual(self.expected_weighted, self.expected_hybrid)

  def test_info_records_the_retriever(self):
    info = loader.export_info(self.paths[hybrid.HYBRID])
    self.assertEqual(hybrid.HYBRID, loader.retriever_of(info))
    self.assertEqual({"method": "reciprocal rank fusion", "k": 60, "depth_per_ranking": 40}, info["fusion"])
    self.assertEqual(hybrid.BM25, loader.retriever_of(loader.export_info(self.paths["bm25_token_ids"])))
    self.assertEqual("dense", loader.retriever_of({}))  # exports from before --retriever
    weighted = loader.export_info(self.paths[_WEIGHTED])
    self.assertEqual({
        "method": loader.WEIGHTED_FUSION,
        "bm25_weight": 0.3,
        "depth_per_ranking": 40
    }, weighted["fusion"])
    self.assertEqual(
        "hybrid: BM25 and the dense tower fused by a weighted sum of z-normalised scores (0.3 x BM25 + 0.7 x "
        "dense), in the model", loader.describe_retriever(weighted))

  def test_serving_names_the_retriever(self):
    service = server.OpenQaService(self.paths[hybrid.HYBRID])
    self.assertEqual(hybrid.HYBRID, service.retriever)
    outputs = service.predict(_QUESTIONS[:2])
    self.assertAllEqual(self.expected_hybrid[:2], outputs["block_ids"])
    self.assertEqual(hybrid.HYBRID,
                     rest_api.format_predictions(outputs, False, service.retriever)["retriever"])
    self.assertEqual(hybrid.HYBRID, service.metadata()["metadata"]["retriever"])
    html = page.render("open_qa", retriever=loader.describe_retriever(service.info))
    self.assertIn('<span id="retriever">hybrid: BM25 and the dense tower fused', html)
    # bin/answer's last line names it (its main in this process, on the model already loaded).
    stdout = io.StringIO()
    with mock.patch.object(loader, "load_open_qa", lambda _: service._model), \
        contextlib.redirect_stdout(stdout):
      answered = in_process.run_main("answer.py", _QUESTIONS[1], f"--saved_model={self.paths[hybrid.HYBRID]}")
    self.assertIsNone(answered.error, answered.traceback)
    self.assertEqual(
        "passages retrieved by hybrid: BM25 and the dense tower fused by reciprocal rank "
        "fusion, in the model",
        stdout.getvalue().splitlines()[-1])

  def test_bad_retriever(self):
    with self.assertRaisesRegex(ValueError, r"--retriever=sparse: choose one of dense, bm25, hybrid"):
      saved_models.export_all(self.tmp, os.path.join(self.tmp, "never"), retriever="sparse")
    with self.assertRaisesRegex(ValueError, r"--hybrid_bm25_weight=0.5 .* --retriever=bm25 fuses nothing"):
      saved_models.export_all(self.tmp,
                              os.path.join(self.tmp, "never"),
                              retriever="bm25",
                              hybrid_bm25_weight=0.5)
    with self.assertRaisesRegex(ValueError, r"--hybrid_bm25_weight=2.0: .*\[0, 1\]"):
      saved_models.export_all(self.tmp,
                              os.path.join(self.tmp, "never"),
                              retriever="hybrid",
                              hybrid_bm25_weight=2.0)


class ExportAfterUpdateTest(tf.test.TestCase):
  """bin/update_index on an ORQA run, then bin/export_saved_model --retriever=hybrid: the BM25 side is
  built from the updated frozen index's corpus, so it holds the added and replaced documents and not the
  removed one."""

  def test_hybrid_follows_the_update(self):
    tmp = self.get_temp_dir()
    made = random_orqa.write_model_dir(os.path.join(tmp, "run"), num_docs=12)
    trained = orqa_model.load_trained(made.model_dir)
    # random_orqa's frozen index holds random vectors; an update checks that the run's document tower
    # reproduces the index, so this index is the tower's own.
    inputs = trained.featurizer.candidate_inputs(
        trained.tokenizer.tokenize([d.title for d in made.documents]),
        trained.tokenizer.tokenize([d.body for d in made.documents]))
    embeddings = trained.model.retriever.embed_documents(tuple(inputs)).numpy()
    shutil.rmtree(frozen_index.frozen_index_dir(made.model_dir))
    index_lib.build_index(embeddings,
                          implementation="brute_force").save(frozen_index.frozen_index_dir(made.model_dir))
    removed, replaced = made.documents[0], made.documents[1]
    # "sculptor" and "painter" are in the vocab but in none of the 12 documents.
    change = index_update.ChangeSet([
        corpus_lib.Document("Kelarle Hall", "A sculptor carved the sculptor circle.", "added-1"),
        corpus_lib.Document(replaced.title, "The painter worked in the painter school.", replaced.doc_id)
    ], [removed.doc_id])
    frozen_index.update_frozen_index(made.model_dir,
                                     orqa_model.load_trained(made.model_dir),
                                     change,
                                     on_existing="replace",
                                     log=lambda _: None)
    path = saved_models.export_open_qa(orqa_model.load_trained(made.model_dir),
                                       os.path.join(tmp, "open_qa"),
                                       retriever=hybrid.HYBRID)
    # Vocab words and stopwords only: a word WordPiece splits would match other documents' pieces.
    questions = ["Who was the sculptor?", "Who was the painter?", removed.title, removed.body]
    doc_ids = loader.answer_questions(loader.load_open_qa(path), questions)["doc_ids"]
    # Only the added (replaced) document matches the unique word, so BM25 ranks it alone and the fusion
    # puts it first whatever the dense tower's rank of it.
    self.assertEqual(b"added-1", doc_ids[0][0])
    self.assertEqual(replaced.doc_id.encode(), doc_ids[1][0])
    self.assertNotIn(removed.doc_id.encode(), doc_ids.ravel().tolist())


if __name__ == "__main__":
  tf.test.main()
