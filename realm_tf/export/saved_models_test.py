"""Tests of the raw-text SavedModels: exported from a bin/train_orqa-style model dir, loaded in a FRESH
process with plain TensorFlow (+ tensorflow_text, + scann for a ScaNN index) after the original vocab file
is gone, they give the Python model's answers, retrieved blocks and embeddings, for a batch holding an
empty, a 2000-character and a non-ASCII question."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import testing_utils
from realm_tf import tokenization
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import orqa_features
from realm_tf.export import saved_models
from realm_tf.modeling import bert
from realm_tf.modeling import orqa as orqa_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import index as index_lib
from realm_tf.training import orqa_trainer

_TESTDATA = os.path.join(testing_utils.repo_root(), "testdata")
_QUESTIONS = ["Where was Savix Lunene born?", "", "What did Wenor found? " * 91,
              "Où est né Zoë Kelarlé, l'ingénieur?", "When was Essan Zoror born?"]
_NUM_DOCS = 40

# Runs in a fresh interpreter with no realm_tf on the path: the SavedModels must stand alone.
_LOADER = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # registers the tokenizer's ops
paths, questions, titles, bodies = json.loads(sys.stdin.read())
out = {}
for kind, path in paths.items():
  if kind == "open_qa_scann":
    import scann  # registers ScaNN's ops
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


def _model_dir(tmp):
  """A bin/train_orqa-style model dir with random weights: configs, frozen index, ckpt-1; the vocab is a
  copy that the test deletes after exporting."""
  vocab = os.path.join(tmp, "vocab_copy.txt")
  shutil.copy(os.path.join(_TESTDATA, "vocab.txt"), vocab)
  tokenizer = tokenization.Tokenizer(vocab)
  with open(os.path.join(_TESTDATA, "corpus.jsonl"), encoding="utf-8") as f:
    records = [json.loads(line) for line in f][:_NUM_DOCS]
  documents = [corpus_lib.Document(r["title"], r["body"], r["id"]) for r in records]
  prefix = os.path.join(tmp, "corpus", "blocks")
  corpus_lib.write_corpus(lambda: documents, tokenizer, prefix, num_shards=1)
  bert_config = bert.tiny_config(285, hidden_size=32, num_layers=1, intermediate_size=64)
  config = realm_config_lib.RealmConfig(retriever_bert=bert_config, reader_bert=bert_config,
                                        vocab_path=vocab, projection_size=16, query_seq_len=24,
                                        candidate_seq_len=64, share_embedders=False)
  orqa = orqa_lib.OrqaConfig(reader_seq_len=96, span_hidden_size=16, max_span_width=6,
                             retriever_beam_size=10, reader_beam_size=3, retrieval_corpus_path=prefix)
  model_dir = os.path.join(tmp, "orqa")
  config.save(model_dir)
  orqa.save(model_dir)
  tf_keras.utils.set_random_seed(3)
  retriever = orqa_trainer.load_retriever_checkpoint(config, None)
  # Random vectors rather than the untrained document tower's: that tower maps these templated documents
  # to near-identical points, and near-ties would make "the same top blocks" depend on float rounding.
  embeddings = np.random.default_rng(0).normal(size=[_NUM_DOCS, 16]).astype(np.float32)
  index_lib.build_index(embeddings, implementation="brute_force").save(
      orqa_trainer.frozen_index_dir(model_dir))
  blocks = orqa_features.load_blocks(prefix, orqa.max_block_len)
  model = orqa_trainer.build_model(config, orqa, embeddings, blocks, tokenizer)
  orqa_lib.copy_retriever_weights(retriever, model.retriever)
  kernel = model.retriever.query_embedder.projection.kernel  # as if fine-tuning moved the query tower
  kernel.assign(kernel + np.random.default_rng(1).normal(scale=0.5, size=kernel.shape))
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model), model_dir, 1).save(checkpoint_number=1)
  return model_dir, vocab, documents


class ExportTest(tf.test.TestCase):

  def test_fresh_process_matches_python_model(self):
    tmp = self.create_tempdir().full_path
    model_dir, vocab, documents = _model_dir(tmp)
    trained = orqa_trainer.load_trained(model_dir)
    predictor = orqa_trainer.OrqaPredictor(trained.model, trained.tokenizer, trained.featurizer,
                                           trained.blocks, batch_size=len(_QUESTIONS), num_retrieved=3)
    expected = predictor.predict(predictor.featurize(_QUESTIONS))
    query_inputs = trained.featurizer.query_inputs(trained.tokenizer.tokenize(_QUESTIONS))
    expected_queries = trained.model.retriever.embed_queries(tuple(query_inputs)).numpy()
    titles = [d.title for d in documents[:4]]
    bodies = [d.body for d in documents[:4]]
    candidate_inputs = trained.featurizer.candidate_inputs(trained.tokenizer.tokenize(titles),
                                                           trained.tokenizer.tokenize(bodies))
    expected_documents = trained.model.retriever.embed_documents(tuple(candidate_inputs)).numpy()

    export_dir = os.path.join(tmp, "export")
    paths = saved_models.export_all(model_dir, export_dir, log=lambda _: None)
    self.assertEqual(set(paths), {"query_embedder", "document_embedder", "open_qa"})
    paths["open_qa_scann"] = saved_models.export_open_qa(
        trained, os.path.join(export_dir, "open_qa_scann"), index="scann",
        scann_options=index_lib.ScannOptions(tree_min_docs=10, num_leaves=4, num_leaves_to_search=4,
                                             num_candidates=_NUM_DOCS))
    self.assertEqual(saved_models.export_info(paths["open_qa_scann"])["scann_parameters"]["mode"],
                     "tree_ah")
    self.assertEqual(saved_models.export_info(paths["open_qa"])["checkpoint"], trained.checkpoint)
    with self.assertRaises(FileExistsError):
      saved_models.export_open_qa(trained, paths["open_qa"])
    os.remove(vocab)  # the SavedModels carry it as an asset

    loaded = subprocess.run(
        [sys.executable, "-c", _LOADER], input=json.dumps([paths, _QUESTIONS, titles, bodies]),
        capture_output=True, text=True, timeout=300, check=False,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=""), cwd=tmp)
    self.assertEqual(loaded.returncode, 0, loaded.stderr[-3000:])
    out = json.loads(loaded.stdout.strip().splitlines()[-1])

    for kind in ("open_qa", "open_qa_scann"):
      with self.subTest(kind):
        qa = out[kind]
        self.assertEqual(qa["answers"], list(expected["answer"]))
        self.assertAllEqual(qa["block_ids"], expected["block_rows"])
        self.assertAllClose(qa["scores"], expected["score"], rtol=1e-4, atol=1e-4)
        self.assertAllClose(qa["retriever_scores"], expected["retriever_logits"], rtol=1e-4, atol=1e-4)
        self.assertEqual(qa["doc_ids"][0], [documents[r].doc_id for r in expected["block_rows"][0]])
        self.assertEqual(qa["block_texts"][3], [documents[r].body for r in expected["block_rows"][3]])
    # Every answer is a slice of the block it came from, accents included.
    for i, answer in enumerate(out["open_qa"]["answers"]):
      self.assertIn(answer, documents[expected["predicted_row"][i]].body)
    self.assertAllClose(out["query_embedder"]["embeddings"], expected_queries, atol=1e-5)
    # The document embedder is the model's (frozen) document tower, not the query tower.
    self.assertAllClose(out["document_embedder"]["embeddings"], expected_documents, atol=1e-5)
    self.assertNotAllClose(expected_documents,
                           trained.model.retriever.embed_queries(tuple(candidate_inputs)).numpy())


if __name__ == "__main__":
  tf.test.main()
