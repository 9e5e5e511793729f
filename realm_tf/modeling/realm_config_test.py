"""Tests of realm_tf.modeling.realm_config: the run configuration the trainer and the refresher share."""

import dataclasses
import json
import os

import tensorflow as tf

from realm_tf.modeling import bert
from realm_tf.modeling import realm_config as realm_config_lib

_TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata")
_VOCAB = os.path.join(_TESTDATA, "vocab.txt")
_VOCAB_SIZE = 285


def _config(**overrides) -> realm_config_lib.RealmConfig:
  values = dict(retriever_bert=bert.tiny_config(_VOCAB_SIZE),
                reader_bert=bert.tiny_config(_VOCAB_SIZE),
                vocab_path=_VOCAB,
                projection_size=16,
                query_seq_len=16,
                candidate_seq_len=32,
                max_masks=4,
                num_candidates=4)
  values.update(overrides)
  return realm_config_lib.RealmConfig(**values)


class RealmConfigTest(tf.test.TestCase):

  def test_save_load_round_trip_from_directory_and_file(self):
    model_dir = os.path.join(self.get_temp_dir(), "round_trip")
    config = _config(retriever_bert=bert.tiny_config(_VOCAB_SIZE, num_layers=1),
                     embedder_layer_norm_epsilon=1e-3,
                     share_embedders=False,
                     do_lower_case=False)
    path = config.save(model_dir)  # creates the directory
    self.assertEqual(path, os.path.join(model_dir, realm_config_lib.CONFIG_NAME))
    from_dir = realm_config_lib.RealmConfig.load(model_dir)
    from_file = realm_config_lib.RealmConfig.load(path)
    self.assertEqual(from_dir, config)
    self.assertEqual(from_file, config)
    self.assertIsInstance(from_dir.retriever_bert, bert.BertConfig)
    self.assertEqual(from_dir.retriever_bert.num_layers, 1)
    self.assertEqual(from_dir.reader_bert.num_layers, 2)
    # Plain JSON on disk (no pickle), nothing left behind under a temporary name.
    with open(path) as f:
      self.assertEqual(json.load(f)["projection_size"], 16)
    self.assertEqual(os.listdir(model_dir), [realm_config_lib.CONFIG_NAME])

  def test_save_overwrites_atomically(self):
    model_dir = self.get_temp_dir()
    _config(projection_size=16).save(model_dir)
    _config(projection_size=32).save(model_dir)
    self.assertEqual(realm_config_lib.RealmConfig.load(model_dir).projection_size, 32)

  def test_check_matches_lists_every_difference(self):
    saved = _config()
    saved.check_matches(_config(), "saved.json")  # identical: no error
    # The vocab path may move between machines; it is not compared.
    saved.check_matches(_config(vocab_path="/elsewhere/vocab.txt"), "saved.json")
    flags = _config(projection_size=32, candidate_seq_len=64)
    with self.assertRaises(ValueError) as cm:
      flags.check_matches(saved, "/runs/realm/realm_config.json")
    message = str(cm.exception)
    self.assertIn("/runs/realm/realm_config.json", message)
    self.assertIn("projection_size: 16 (saved) vs 32 (flags)", message)
    self.assertIn("candidate_seq_len: 32 (saved) vs 64 (flags)", message)
    self.assertNotIn("query_seq_len", message)
    self.assertNotIn("vocab_path", message)

  def test_check_matches_compares_nested_bert_configs(self):
    saved = _config()
    flags = _config(reader_bert=bert.tiny_config(_VOCAB_SIZE, hidden_size=32))
    with self.assertRaisesRegex(ValueError, "reader_bert"):
      flags.check_matches(saved, "realm_config.json")

  def test_tokenizer_and_featurizer_from_the_config(self):
    config = _config()
    tokenizer = config.tokenizer()
    self.assertEqual(tokenizer.vocab_size, _VOCAB_SIZE)
    featurizer = config.featurizer(tokenizer)
    self.assertEqual(featurizer.query_seq_len, 16)
    self.assertEqual(featurizer.candidate_seq_len, 32)
    self.assertEqual(featurizer.max_masks, 4)

  def test_tokenizer_with_vocab_of_another_size_names_the_vocab(self):
    for name, config in (("retriever", _config(retriever_bert=bert.tiny_config(300))),
                         ("reader", _config(reader_bert=bert.tiny_config(30522)))):
      with self.subTest(name):
        with self.assertRaises(ValueError) as cm:
          config.tokenizer()
        message = str(cm.exception)
        self.assertIn(_VOCAB, message)
        self.assertIn(f"{_VOCAB_SIZE} tokens", message)
        self.assertIn(f"the {name} BERT", message)
        with self.assertRaises(ValueError):  # featurizer() builds the tokenizer and checks too
          config.featurizer()

  def test_load_of_missing_file_says_what_writes_it(self):
    missing_dir = os.path.join(self.get_temp_dir(), "no_run_here")
    os.makedirs(missing_dir)
    with self.assertRaises(FileNotFoundError) as cm:
      realm_config_lib.RealmConfig.load(missing_dir)
    message = str(cm.exception)
    self.assertIn(os.path.join(missing_dir, realm_config_lib.CONFIG_NAME), message)
    self.assertIn("the trainer writes it", message)
    self.assertIn("bin/train_realm", message)
    with self.assertRaises(FileNotFoundError):
      realm_config_lib.RealmConfig.load(os.path.join(missing_dir, "other.json"))

  def test_load_of_a_file_that_is_not_a_config_raises_value_error(self):
    directory = self.get_temp_dir()
    for name, text in (("broken.json", "{not json"), ("unknown_key.json",
                                                      json.dumps(dict(_config().to_dict(), surprise=1))),
                       ("missing_key.json", json.dumps({"vocab_path": _VOCAB}))):
      with self.subTest(name):
        path = os.path.join(directory, name)
        with open(path, "w") as f:
          f.write(text)
        with self.assertRaisesRegex(ValueError, "not a realm_tf run configuration") as cm:
          realm_config_lib.RealmConfig.load(path)
        self.assertIn(path, str(cm.exception))

  def test_build_retriever_shares_or_separates_towers(self):
    small = bert.tiny_config(_VOCAB_SIZE, hidden_size=32, num_layers=1, intermediate_size=64)
    shared = _config(retriever_bert=small).build_retriever()
    self.assertIs(shared.query_embedder, shared.doc_embedder)
    self.assertEqual(shared.doc_embedder.projection_size, 16)
    self.assertNotEmpty(shared.doc_embedder.weights)  # built, ready to restore into
    separate = _config(retriever_bert=small, share_embedders=False).build_retriever()
    self.assertIsNot(separate.query_embedder, separate.doc_embedder)
    self.assertLen(separate.weights, 2 * len(shared.weights))

  def test_embedder_pooling_reaches_the_retriever_and_old_configs_load_as_pooler(self):
    model_dir = self.get_temp_dir()
    path = _config(embedder_pooling="mean").save(model_dir)
    loaded = realm_config_lib.RealmConfig.load(model_dir)
    self.assertEqual(loaded.embedder_pooling, "mean")
    retriever = loaded.build_retriever()
    self.assertEqual(retriever.doc_embedder.pooling, "mean")
    self.assertEqual(retriever.query_embedder.pooling, "mean")
    # A run configuration written before the field existed is the original [CLS] pooler.
    with open(path) as f:
      values = json.load(f)
    del values["embedder_pooling"]
    with open(path, "w") as f:
      json.dump(values, f)
    self.assertEqual(realm_config_lib.RealmConfig.load(model_dir).embedder_pooling, "pooler")
    with self.assertRaisesRegex(ValueError, "pooling must be one of"):
      _config(embedder_pooling="max")

  def test_configs_with_the_removed_retrieval_score_scale(self):
    model_dir = self.get_temp_dir()
    path = _config().save(model_dir)
    with open(path) as f:
      values = json.load(f)
    # 1.0 was the default, REALM's raw inner products: such a run continues unchanged.
    values["retrieval_score_scale"] = 1.0
    with open(path, "w") as f:
      json.dump(values, f)
    self.assertEqual(realm_config_lib.RealmConfig.load(model_dir), _config())
    # Any other scale trained a model this code no longer computes: refused, naming the file.
    values["retrieval_score_scale"] = 0.125
    with open(path, "w") as f:
      json.dump(values, f)
    with self.assertRaisesRegex(ValueError, f"{path}: retrieval_score_scale=0.125.*new --model_dir"):
      realm_config_lib.RealmConfig.load(model_dir)

  def test_vocab_sha256_is_saved_old_configs_load_and_save_or_check_records_it(self):
    model_dir = os.path.join(self.get_temp_dir(), "vocab_sha")
    config = _config(vocab_sha256="ab" * 32)
    path = config.save(model_dir)
    self.assertEqual(realm_config_lib.RealmConfig.load(model_dir), config)
    self.assertEqual(realm_config_lib.RealmConfig.saved_vocab_sha256(model_dir), "ab" * 32)
    self.assertIsNone(realm_config_lib.RealmConfig.saved_vocab_sha256(self.get_temp_dir() + "/none"))
    # Compared by realm_tf.data.corpus.check_vocab (which names the files), not by check_matches.
    _config(vocab_sha256="cd" * 32).check_matches(config, model_dir)
    # A configuration written before the field existed loads, and a resumed run records the checksum.
    with open(path) as f:
      values = json.load(f)
    del values["vocab_sha256"]
    with open(path, "w") as f:
      json.dump(values, f)
    self.assertIsNone(realm_config_lib.RealmConfig.load(model_dir).vocab_sha256)
    config.save_or_check(model_dir)
    self.assertEqual(realm_config_lib.RealmConfig.load(model_dir).vocab_sha256, "ab" * 32)
    with self.assertRaisesRegex(ValueError, "projection_size"):
      _config(projection_size=8, vocab_sha256="ab" * 32).save_or_check(model_dir)
    fresh = os.path.join(self.get_temp_dir(), "fresh")
    config.save_or_check(fresh)
    self.assertEqual(realm_config_lib.RealmConfig.load(fresh), config)

  def test_bert_config_file_errors_name_the_file_and_what_a_config_needs(self):
    directory = self.get_temp_dir()
    path = os.path.join(directory, "bc.json")
    with open(path, "w") as f:
      json.dump(
          {
              "hidden_size": 64,
              "num_hidden_layers": 2,
              "num_attention_heads": 2,
              "intermediate_size": 128
          }, f)
    with self.assertRaises(ValueError) as ctx:
      bert.BertConfig.from_json_file(path)
    message = str(ctx.exception)
    self.assertIn(f"{path}: missing ['vocab_size']", message)
    self.assertIn(
        "needs vocab_size, hidden_size, num_hidden_layers, num_attention_heads and "
        "intermediate_size", message)
    with open(path, "w") as f:
      json.dump({"vocab_size": 10}, f)
    with self.assertRaisesRegex(
        ValueError, r"missing \['hidden_size', 'num_hidden_layers', "
        r"'num_attention_heads', 'intermediate_size'\]"):
      bert.BertConfig.from_json_file(path)
    with open(path, "w") as f:
      json.dump([1, 2], f)
    with self.assertRaisesRegex(ValueError, f"{path}: a BERT config is a JSON object, got list"):
      bert.BertConfig.from_json_file(path)
    with self.assertRaisesRegex(FileNotFoundError, "BERT config .*nope.json does not exist"):
      bert.BertConfig.from_json_file(os.path.join(directory, "nope.json"))
    # A Google config with the num_hidden_layers name or the num_layers name both load.
    with open(path, "w") as f:
      json.dump(
          {
              "vocab_size": 10,
              "hidden_size": 64,
              "num_layers": 3,
              "num_attention_heads": 2,
              "intermediate_size": 128
          }, f)
    self.assertEqual(bert.BertConfig.from_json_file(path).num_layers, 3)

  def test_config_is_immutable(self):
    with self.assertRaises(dataclasses.FrozenInstanceError):
      _config().projection_size = 8  # pytype: disable=attribute-error


if __name__ == "__main__":
  tf.test.main()
