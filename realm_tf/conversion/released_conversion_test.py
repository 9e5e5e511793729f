"""Tests of released_conversion: converted released checkpoints must restore into realm_tf's models and
compute as the originals, and converted block embeddings must be a MIPS index whose rows are the blocks.

The released weights and the float64 numpy reference of the original models are released_test's.
"""
# pylint: disable=protected-access (released_test's fixtures)

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf

from realm_tf.checkpoints import bert_mapping
from realm_tf.checkpoints import released as rc
from realm_tf.checkpoints import released_test as fixtures
from realm_tf.checkpoints import sources
from realm_tf.checkpoints import training_state
from realm_tf.conversion import released_conversion
from realm_tf.modeling import bert
from realm_tf.modeling import knowledge_augmented_encoder as kae_lib
from realm_tf.modeling import reader as reader_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import converted_index
from realm_tf.retrieval import index as index_lib
from realm_tf.testing import released_weights


class ReleasedConversionTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    tf.random.set_seed(1234)  # Initial weights differ from the loaded ones, the same in every run.
    self._dir = self.create_tempdir().full_path

  def _checkpoint(self, params, name="model.ckpt", optimizer=True):
    variables = fixtures._with_optimizer(params) if optimizer else dict(params)
    return released_weights.write_tf1_checkpoint(os.path.join(self._dir, name), variables)

  def test_vocab_mismatch(self):
    path = self._checkpoint(fixtures._embedder_params(), optimizer=False)
    vocab = fixtures._write_vocab(self.create_tempdir().full_path, fixtures._VOCAB - 1)
    with self.assertRaisesRegex(
        sources.ConversionError, rf"vocab {vocab} has {fixtures._VOCAB - 1} tokens but {path} variable "
        rf"{fixtures._EMBEDDER_BERT}embeddings/word_embeddings has "
        rf"{fixtures._VOCAB} rows"):
      released_conversion.convert(path,
                                  os.path.join(self._dir, "out"),
                                  vocab_path=vocab,
                                  num_attention_heads=fixtures._HEADS)

  # --- conversion into realm_tf checkpoints --------------------------------------------------------

  def test_convert_hub_module_embedder_restores_via_restore_retriever(self):
    # What bin/convert_checkpoint does with a released hub module directory (convert, then print the
    # summary with list_all), in this process: the binary's own process, exit status and printed report
    # are bin/released_orqa_test's.
    params = fixtures._embedder_params()
    module = os.path.join(self._dir, "embedder")  # A hub module directory, as released.
    os.makedirs(os.path.join(module, "variables"))
    os.makedirs(os.path.join(module, "assets"))
    released_weights.write_tf1_checkpoint(os.path.join(module, "variables", "variables"),
                                          fixtures._with_optimizer(params))
    fixtures._write_vocab(os.path.join(module, "assets"))
    output_dir = os.path.join(self._dir, "converted")
    summary = released_conversion.convert(module, output_dir,
                                          num_attention_heads=fixtures._HEADS).summary(list_all=True)
    self.assertIn("layout realm_embedder", summary)
    self.assertIn(f"{len(params) - 5} variables mapped, 0 unmapped, 5 ignored", summary)
    self.assertIn("ignored: module/module/module/cls/predictions/output_bias", summary)
    self.assertIn("mapped: module/module/dense/kernel", summary)

    config = realm_config_lib.RealmConfig.load(output_dir)
    self.assertEqual(config.retriever_bert, fixtures._CONFIG)
    self.assertEqual((config.projection_size, config.embedder_layer_norm_epsilon),
                     (fixtures._PROJECTION, 1e-12))
    self.assertEqual(config.tokenizer().vocab_size, fixtures._VOCAB)
    retriever = config.build_retriever()
    training_state.restore_retriever(retriever, output_dir)
    queries, docs = fixtures._embeddings(retriever)
    self.assertAllClose(fixtures._np_embed(params, fixtures._EMBEDDER_BERT, fixtures._EMBEDDER_HEAD,
                                           fixtures._IDS, fixtures._MASK, fixtures._TYPES),
                        queries,
                        atol=fixtures._ATOL,
                        rtol=fixtures._RTOL)
    self.assertAllClose(fixtures._np_embed(params, fixtures._EMBEDDER_BERT, fixtures._EMBEDDER_HEAD,
                                           fixtures._DOC_IDS, fixtures._DOC_MASK, fixtures._DOC_TYPES),
                        docs,
                        atol=fixtures._ATOL,
                        rtol=fixtures._RTOL)

  def test_convert_realm_bert_is_an_init_reader_checkpoint(self):
    params = fixtures._realm_bert_params()
    path = self._checkpoint(params)
    output_dir = os.path.join(self._dir, "bert")
    result = released_conversion.convert(path, output_dir, num_attention_heads=fixtures._HEADS)
    self.assertEqual(result.layout.name, rc.REALM_BERT)
    # As bin/train_realm --init_reader_checkpoint does, with the written bert_config.json.
    config = bert.BertConfig.from_json_file(os.path.join(output_dir, "bert_config.json"))
    self.assertEqual(config, fixtures._CONFIG)
    model = kae_lib.KnowledgeAugmentedEncoder(config)
    report = bert_mapping.load_bert_weights(model.encoder, output_dir, masked_lm=model.masked_lm)
    self.assertEqual(report.prefix, "encoder/")
    expected = fixtures._np_mlm_logits(params, "bert/", "cls/predictions/", fixtures._IDS, fixtures._MASK,
                                       fixtures._TYPES, fixtures._POSITIONS)
    self.assertAllClose(expected, fixtures._kae_logits(model), atol=fixtures._ATOL, rtol=fixtures._RTOL)

  def test_convert_orqa_writes_retriever_and_reader(self):
    params = fixtures._orqa_params()
    path = self._checkpoint(params)
    vocab = fixtures._write_vocab(self.create_tempdir().full_path)
    output_dir = os.path.join(self._dir, "orqa")
    released_conversion.convert(path, output_dir, vocab_path=vocab, num_attention_heads=fixtures._HEADS)
    with open(os.path.join(output_dir, converted_index.CONVERSION_NAME)) as f:
      info = json.load(f)
    self.assertEqual((info["layout"], info["span_hidden_size"]), (rc.ORQA_FROM_REALM, fixtures._SPAN_HIDDEN))
    config = realm_config_lib.RealmConfig.load(output_dir)
    retriever = config.build_retriever()
    training_state.restore_retriever(retriever, output_dir)
    reader = reader_lib.SpanReader(config.reader_bert,
                                   seq_len=6,
                                   span_hidden_size=fixtures._SPAN_HIDDEN,
                                   max_span_width=fixtures._MAX_SPAN_WIDTH)
    rc._build_reader(reader)  # pylint: disable=protected-access
    status = tf.train.Checkpoint(reader=reader).read(tf.train.latest_checkpoint(output_dir))
    status.expect_partial().assert_existing_objects_matched()
    queries, docs = fixtures._embeddings(retriever)
    retriever_logits = queries[:1] @ docs[:2].T
    expected, inside, _ = fixtures._np_span_logits(params, retriever_logits)
    logits = fixtures._reader_logits(reader, retriever_logits).logits.numpy()
    self.assertAllClose(expected[inside], logits[inside], atol=fixtures._ATOL, rtol=fixtures._RTOL)

  def test_sequence_lengths_come_from_the_position_tables(self):
    """A 16-position BERT gets 16 (not REALM's 96/288 or ORQA's 64/288/320); flags override within the
    table, and a length beyond it names the flag, the table's variable and its size."""
    path = self._checkpoint(fixtures._orqa_params())
    vocab = fixtures._write_vocab(self.create_tempdir().full_path)
    output_dir = os.path.join(self._dir, "orqa")
    result = released_conversion.convert(path,
                                         output_dir,
                                         vocab_path=vocab,
                                         num_attention_heads=fixtures._HEADS,
                                         query_seq_len=8)
    want = {"query_seq_len": 8, "candidate_seq_len": 16, "reader_seq_len": 16}
    self.assertEqual(result.sequence_lengths, want)
    self.assertIn("sequence lengths: query_seq_len 8, candidate_seq_len 16, reader_seq_len 16",
                  result.summary())
    config, orqa = released_conversion.converted_orqa_configs(output_dir)
    self.assertEqual((config.query_seq_len, config.candidate_seq_len), (8, 16))
    self.assertEqual(
        (orqa.reader_seq_len, orqa.span_hidden_size, orqa.max_span_width, orqa.reader_layer_norm_epsilon),
        (16, fixtures._SPAN_HIDDEN, 10, 1e-3))
    with self.assertRaisesRegex(
        sources.ConversionError, rf"reader_seq_len 17 \(--reader_seq_len\) does not "
        rf"fit the reader BERT: its position table {fixtures._READER_BERT}embeddings/"
        rf"position_embeddings in {path} holds 16 positions"):
      released_conversion.convert(path,
                                  os.path.join(self._dir, "too_long"),
                                  vocab_path=vocab,
                                  num_attention_heads=fixtures._HEADS,
                                  reader_seq_len=17)
    self.assertFalse(os.path.exists(os.path.join(self._dir, "too_long")))
    embedder = self._checkpoint(fixtures._embedder_params(), "embedder.ckpt")
    result = released_conversion.convert(embedder,
                                         os.path.join(self._dir, "embedder"),
                                         vocab_path=vocab,
                                         num_attention_heads=fixtures._HEADS)
    self.assertEqual(result.sequence_lengths, {"query_seq_len": 16, "candidate_seq_len": 16})
    with self.assertRaisesRegex(
        sources.ConversionError, r"layout realm_embedder has no use for "
        r"reader_seq_len \(--reader_seq_len\)"):
      rc.load_released(embedder, num_attention_heads=fixtures._HEADS, reader_seq_len=8)
    # An ORQA conversion written before the lengths were recorded, or with lengths beyond the tables.
    with open(os.path.join(output_dir, converted_index.CONVERSION_NAME)) as f:
      info = json.load(f)
    dataclasses.replace(config, query_seq_len=96).save(output_dir)
    with self.assertRaisesRegex(
        ValueError, r"realm_config\.json: query_seq_len 96 exceeds the 16 "
        r"positions of the retriever BERT's position table; convert the "
        r"checkpoint again"):
      released_conversion.converted_orqa_configs(output_dir)
    del info["orqa_config"]
    with open(os.path.join(output_dir, converted_index.CONVERSION_NAME), "w") as f:
      json.dump(info, f)
    with self.assertRaisesRegex(ValueError, r"records no orqa_config .*convert the checkpoint again"):
      released_conversion.converted_orqa_configs(output_dir)
    with self.assertRaisesRegex(ValueError, r"is not a converted ORQA checkpoint .*layout "
                                r"realm_embedder"):
      released_conversion.converted_orqa_configs(os.path.join(self._dir, "embedder"))

  def test_block_emb_index_rows_are_blocks(self):
    rng = np.random.default_rng(5)
    block_emb = rng.normal(size=[7, fixtures._PROJECTION]).astype(np.float32)
    encoded = released_weights.write_tf1_checkpoint(os.path.join(self._dir, "encoded.ckpt"),
                                                    {"block_emb": block_emb})
    texts = [f"block {i} text é" for i in range(7)]
    blocks_path = os.path.join(self._dir, "blocks.tfr")
    titles_path = os.path.join(self._dir, "titles.tfr")
    for path, values in ((blocks_path, texts), (titles_path, [f"title {i}" for i in range(7)])):
      with tf.io.TFRecordWriter(path) as writer:
        for value in values:
          writer.write(value.encode("utf-8"))
    output_dir = os.path.join(self._dir, "index")
    result = released_conversion.convert(encoded,
                                         output_dir,
                                         blocks_path=blocks_path,
                                         titles_path=titles_path,
                                         index_implementation="brute_force")
    self.assertEqual(result.layout.name, rc.BLOCK_EMB)
    mips = index_lib.load_index(result.outputs["index"])
    queries = rng.normal(size=[3, fixtures._PROJECTION]).astype(np.float32)
    ids, scores = mips.search(queries, k=7)
    exact = queries.astype(np.float64) @ block_emb.T.astype(np.float64)
    self.assertAllEqual(np.argsort(-exact, axis=1, kind="stable"), ids)
    self.assertAllClose(np.sort(exact, axis=1)[:, ::-1], scores, atol=fixtures._ATOL, rtol=fixtures._RTOL)
    records = converted_index.load_block_texts(result.outputs["blocks"])
    self.assertEqual([r["row"] for r in records], list(range(7)))
    self.assertEqual(records[int(ids[0, 0])]["text"], texts[int(ids[0, 0])])
    self.assertEqual(records[6]["title"], "title 6")
    # Blocks and embeddings of different corpora are refused, and no text file is left.
    with tf.io.TFRecordWriter(blocks_path) as writer:
      for value in texts[:6]:
        writer.write(value.encode("utf-8"))
    other_dir = os.path.join(self._dir, "index2")
    with self.assertRaisesRegex(sources.ConversionError,
                                rf"{blocks_path} has 6 records but {encoded} has 7 rows"):
      released_conversion.convert(encoded,
                                  other_dir,
                                  blocks_path=blocks_path,
                                  index_implementation="brute_force")
    self.assertFalse(os.path.exists(os.path.join(other_dir, converted_index.BLOCKS_NAME)))


if __name__ == "__main__":
  tf.test.main()
