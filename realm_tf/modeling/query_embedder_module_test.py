"""Tests of the query tower's SavedModel module: its three input forms embed a question alike, and the
published index's form (BERT_INPUTS) keeps its signature through a save and load."""

import os

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
import tf_keras

from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import query_embedder_module as query_embedder
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.testing import test_paths

_QUESTIONS = ["who built the lighthouse", "where is the village"]


class QueryEmbedderModuleTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    tf_keras.utils.set_random_seed(0)
    vocab_path = os.path.join(test_paths.repo_root(), "testdata", "vocab.txt")
    bert_config = bert.tiny_config(285, hidden_size=32, num_layers=1, intermediate_size=64)
    config = realm_config_lib.RealmConfig(retriever_bert=bert_config,
                                          reader_bert=bert_config,
                                          vocab_path=vocab_path,
                                          projection_size=16,
                                          query_seq_len=16,
                                          candidate_seq_len=32)
    cls.tokenizer = config.tokenizer()
    cls.featurizer = config.featurizer(cls.tokenizer)
    cls.tower = embedder_lib.build_retriever(bert_config, 16).query_embedder
    cls.inputs = tuple(cls.featurizer.query_inputs(cls.tokenizer.tokenize(tf.constant(_QUESTIONS))))
    cls.expected = cls.tower(cls.inputs, training=False).numpy()

  def test_the_three_forms_embed_alike(self):
    text = query_embedder.QueryEmbedderModule(self.tower, query_embedder.TEXT, self.featurizer,
                                              self.tokenizer)
    self.assertAllClose(text.embed(tf.constant(_QUESTIONS))["embeddings"], self.expected, atol=1e-6)
    token_ids = query_embedder.QueryEmbedderModule(self.tower, query_embedder.TOKEN_IDS, self.featurizer)
    self.assertIsNone(token_ids.tokenizer)  # no tensorflow_text op in the core-ops form
    self.assertAllClose(token_ids.embed(self.inputs[0], self.inputs[1])["embeddings"],
                        self.expected,
                        atol=1e-6)
    packed = query_embedder.QueryEmbedderModule(self.tower, query_embedder.BERT_INPUTS)
    self.assertAllClose(packed.embed(*self.inputs)["embeddings"], self.expected, atol=1e-6)

  def test_bert_inputs_form_saves_with_the_published_index_signature(self):
    path = os.path.join(self.create_tempdir().full_path, "query_embedder")
    tf.saved_model.save(query_embedder.QueryEmbedderModule(self.tower, query_embedder.BERT_INPUTS), path)
    loaded = tf.saved_model.load(path)
    token_ids, mask, segment_ids = (tf.cast(x, tf.int32) for x in self.inputs)
    self.assertAllClose(loaded.embed(token_ids, mask, segment_ids)["embeddings"], self.expected, atol=1e-6)
    # The tower's variables without the tower as a Keras object (realm_tf/modeling/untracked.py): Keras's
    # own serialization would trace and later restore every layer's functions.
    self.assertLen(loaded.query_embedder_variables, len(self.tower.variables))
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
      saved.ParseFromString(f.read())
    identifiers = {
        node.user_object.identifier
        for node in saved.meta_graphs[0].object_graph_def.nodes
        if node.HasField("user_object")
    }
    self.assertEmpty({i for i in identifiers if "keras" in i}, identifiers)

  def test_missing_pieces_are_named(self):
    with self.assertRaisesRegex(ValueError, "pass the run's featurizer"):
      query_embedder.QueryEmbedderModule(self.tower, query_embedder.TOKEN_IDS)
    with self.assertRaisesRegex(ValueError, "pass the run's tokenizer"):
      query_embedder.QueryEmbedderModule(self.tower, query_embedder.TEXT, self.featurizer)
    with self.assertRaisesRegex(ValueError, "expected one of"):
      query_embedder.QueryEmbedderModule(self.tower, "questions")


if __name__ == "__main__":
  tf.test.main()
