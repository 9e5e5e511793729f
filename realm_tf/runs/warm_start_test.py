"""Tests of the warm starts: retriever checkpoints load tower by tower (shared or two towers) and a span
reader from a reader checkpoint, or fail with a message that names the flag and the fix."""

import dataclasses
import os

from safetensors import numpy as safetensors_numpy
import tensorflow as tf
import tf_keras

from realm_tf.checkpoints import bert_mapping_test as fixtures
from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import reader as reader_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.runs import warm_start
from realm_tf.testing import test_paths

_BERT = bert.tiny_config(285, hidden_size=32, num_layers=1, intermediate_size=64)
_CONFIG = realm_config_lib.RealmConfig(retriever_bert=_BERT,
                                       reader_bert=_BERT,
                                       vocab_path=os.path.join(test_paths.repo_root(), "testdata",
                                                               "vocab.txt"),
                                       projection_size=16,
                                       query_seq_len=24,
                                       candidate_seq_len=64)


class RetrieverCheckpointTest(tf.test.TestCase):

  def test_shared_and_two_tower_checkpoints(self):
    tmp = self.create_tempdir().full_path
    tf_keras.utils.set_random_seed(1)
    shared = embedder_lib.build_retriever(_BERT, 16)
    shared_path = tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=shared)).write(
        os.path.join(tmp, "shared", "ckpt-1"))
    loaded = warm_start.load_retriever_checkpoint(_CONFIG, shared_path)
    self.assertAllEqual(loaded.query_embedder.weights[0], shared.doc_embedder.weights[0])

    two = embedder_lib.build_retriever(_BERT, 16, share_embedders=False)
    two.query_embedder.weights[0].assign(two.query_embedder.weights[0] + 1.0)
    two_path = tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=two)).write(
        os.path.join(tmp, "two", "ckpt-1"))
    loaded = warm_start.load_retriever_checkpoint(_CONFIG, two_path)
    self.assertAllEqual(loaded.query_embedder.weights[0], two.query_embedder.weights[0])
    self.assertAllEqual(loaded.doc_embedder.weights[0], two.doc_embedder.weights[0])
    self.assertNotAllEqual(loaded.query_embedder.weights[0], loaded.doc_embedder.weights[0])

  def test_hugging_face_bert_directory_initializes_the_shared_tower(self):
    # e.g. bin/train_fid_kd --retriever_checkpoint=<all-MiniLM-L6-v2's directory> --projection_size=0.
    params = {
        k: v
        for k, v in fixtures._random_params(_BERT, seed=2).items()  # pylint: disable=protected-access
        if not k.startswith("cls/")
    }
    directory = self.create_tempdir().full_path
    safetensors_numpy.save_file(
        fixtures._hf_names(params, prefix=""),  # pylint: disable=protected-access
        os.path.join(directory, "model.safetensors"))
    config = dataclasses.replace(_CONFIG, projection_size=0, embedder_pooling=embedder_lib.MEAN)
    loaded = warm_start.load_retriever_checkpoint(config, directory)
    self.assertIs(loaded.query_embedder, loaded.doc_embedder)
    self.assertAllClose(loaded.doc_embedder.encoder.get_embedding_table(),
                        params["bert/embeddings/word_embeddings"])
    self.assertIsNone(loaded.doc_embedder.projection)

    wider = dataclasses.replace(config, retriever_bert=bert.tiny_config(285, hidden_size=64, num_layers=1))
    with self.assertRaisesRegex(ValueError, r"--retriever_checkpoint=.* does not fit this run's retriever"):
      warm_start.load_retriever_checkpoint(wider, directory)

  def test_wrong_hidden_size_names_flag_and_fix(self):
    tmp = self.create_tempdir().full_path
    other = embedder_lib.build_retriever(bert.tiny_config(285, hidden_size=64, num_layers=1), 16)
    path = tf.train.Checkpoint(retriever=other).write(os.path.join(tmp, "ckpt-0"))
    with self.assertRaisesRegex(
        ValueError, r"--retriever_checkpoint=.*ckpt-0 does not fit this run's "
        r"retriever \(hidden_size 32.*--bert_config"):
      warm_start.load_retriever_checkpoint(_CONFIG, path)


class ReaderWarmStartTest(tf.test.TestCase):

  def test_whole_span_reader_from_a_reader_checkpoint(self):
    tmp = self.create_tempdir().full_path

    def reader(seed, span_hidden_size=8):
      tf_keras.utils.set_random_seed(seed)
      model = reader_lib.SpanReader(_BERT, seq_len=16, span_hidden_size=span_hidden_size, max_span_width=3)
      ids = tf.zeros([1, 1, 16], tf.int32)
      model(((ids, ids, ids), ids, tf.zeros([1, 1])))
      return model

    source = reader(1)
    path = tf.train.Checkpoint(reader=source).write(os.path.join(tmp, "ckpt-0"))
    target = reader(2)
    message = warm_start.warm_start_reader(target, path)
    self.assertIn("span head", message)
    self.assertAllEqual(target.span_output.kernel, source.span_output.kernel)
    self.assertAllEqual(target.encoder.weights[0], source.encoder.weights[0])
    with self.assertRaisesRegex(ValueError, "--span_hidden_size"):
      warm_start.warm_start_reader(reader(3, span_hidden_size=4), path)


if __name__ == "__main__":
  tf.test.main()
