"""Tests of the FiD reader and its cross-attention scores (realm_tf.modeling.fid_reader)."""

import json
import os

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import evaluation
from realm_tf import tokenization
from realm_tf.checkpoints import bert_mapping
from realm_tf.checkpoints import fid_warm_start
from realm_tf.data import fid_features
from realm_tf.modeling import bert
from realm_tf.modeling import fid_reader
from realm_tf.testing import released_weights
from realm_tf.testing import tiny_inputs
from realm_tf.training import train_lib


def _tiny_config(vocab_size, **overrides):
  # The tiny test vocab spells most words letter by letter, so L = 24 truncates inside the title.
  values = dict(vocab_size=vocab_size,
                hidden_size=32,
                num_heads=2,
                num_encoder_layers=1,
                num_decoder_layers=2,
                intermediate_size=64,
                passage_seq_len=24,
                answer_seq_len=6)
  values.update(overrides)
  return fid_reader.FidConfig(**values)


def _train_step(model, learning_rate):
  """An uncompiled TrainStep under Adam whose variables (slots, iterations) exist before the first step.

  Tracing the step is most of a training test's cost here, and a tf.function that creates variables on
  its first call is traced twice (once creating them, once more without); made beforehand, once."""
  optimizer = tf_keras.optimizers.legacy.Adam(learning_rate)
  optimizer._create_all_weights(model.trainable_variables)  # pylint: disable=protected-access
  return train_lib.TrainStep(model, optimizer, jit_compile=False)


def _features(tokenizer, config):
  questions = ["who is abc?", "what is xyz?"]
  passages = [[("t1", "abc 12 is here"), ("t2", "nothing")], [("t3", "xyz there"), ("t4", "padding")]]
  examples = fid_features.tokenize_examples(tokenizer, questions, passages, ["abc 12", "xyz"])
  return fid_features.pad_examples(tokenizer, examples, config.passage_seq_len, config.answer_seq_len)


class _Seeded(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    tf_keras.utils.set_random_seed(7)
    self.tokenizer = tokenization.Tokenizer(tiny_inputs.write_vocab(self.get_temp_dir()))


class AggregationTest(tf.test.TestCase):

  def test_hand_computed_average_ignores_padding(self):
    # B=1, layers=2, heads=2, n=2 passages of L=3 tokens; passage 0 has 2 real tokens, passage 1 has 1.
    logits = np.zeros([1, 2, 2, 6], np.float32)
    # layer 0: head 0, head 1; layer 1: head 0, head 1 (tokens 0..2 passage 0, 3..5 passage 1).
    logits[0, 0, 0] = [1, 2, 100, 4, -50, -50]
    logits[0, 0, 1] = [3, 4, 100, 0, 99, 99]
    logits[0, 1, 0] = [5, 6, -100, 8, 7, 7]
    logits[0, 1, 1] = [7, 8, 100, -4, 1, 1]
    mask = np.array([[[1, 1, 0], [1, 0, 0]]], np.int32)
    got = fid_reader.aggregate_cross_attention(tf.constant(logits), tf.constant(mask)).numpy()
    # Passage 0: (1+2 + 3+4 + 5+6 + 7+8) / (2 tokens * 2 layers * 2 heads) = 36 / 8.
    # Passage 1: (4 + 0 + 8 - 4) / (1 * 2 * 2) = 2.
    self.assertAllClose([[4.5, 2.0]], got)
    # Sensitivity: a plain mean over all L tokens differs.
    plain = logits.reshape([1, 2, 2, 2, 3]).mean(axis=(1, 2, 4))
    self.assertGreater(np.abs(plain - got).max(), 1.0)

  def test_all_padding_passage_scores_zero(self):
    logits = tf.ones([2, 1, 1, 4]) * 3.0
    mask = tf.constant([[[1, 1], [0, 0]], [[0, 1], [1, 0]]])
    self.assertAllClose([[3.0, 0.0], [3.0, 3.0]], fid_reader.aggregate_cross_attention(logits, mask))


class AttentionMassTest(tf.test.TestCase):

  def test_hand_computed_mass_per_passage(self):
    # B=1, layers=1, heads=2, n=2 passages of L=2; passage 1's second token is padding.
    logits = np.zeros([1, 1, 2, 4], np.float32)
    logits[0, 0, 0] = [0.0, np.log(3.0), 0.0, 100.0]  # head 0: probabilities 1/5, 3/5, 1/5 (padding 0)
    mask = np.array([[[1, 1], [1, 0]]], np.int32)
    got = fid_reader.aggregate_attention_mass(tf.constant(logits), tf.constant(mask)).numpy()
    # head 0: passages 0.8 / 0.2; head 1 (uniform over 3 real tokens): 2/3 / 1/3; averaged.
    self.assertAllClose(np.log([[0.5 * (0.8 + 2 / 3), 0.5 * (0.2 + 1 / 3)]]), got, atol=1e-5)
    self.assertAllClose([1.0], np.exp(got).sum(-1), atol=1e-5)

  def test_empty_passage_gets_a_finite_floor(self):
    got = fid_reader.aggregate_attention_mass(tf.zeros([1, 1, 1, 4]), tf.constant([[[1, 1], [0, 0]]]))
    self.assertAllClose([[0.0, np.log(1e-20)]], got, atol=1e-4)


class ReaderTest(_Seeded):

  def test_passages_are_encoded_independently(self):
    """Changing passage 1 leaves passage 0's encoder output unchanged (no cross-passage attention)."""
    config = _tiny_config(self.tokenizer.vocab_size)
    reader = fid_reader.build_reader(config)
    features = _features(self.tokenizer, config)
    memory, _ = reader.encode(features.passage_ids, features.passage_mask)
    changed = features.passage_ids.copy()
    changed[:, 1, 5] = (changed[:, 1, 5] + 3) % config.vocab_size
    other, _ = reader.encode(changed, features.passage_mask)
    length = config.passage_seq_len
    self.assertAllClose(memory[:, :length], other[:, :length], atol=1e-6)
    self.assertGreater(np.abs(memory[:, length:] - other[:, length:]).max(), 1e-4)

  def test_overfits_and_greedy_decodes_the_answer(self):
    config = _tiny_config(self.tokenizer.vocab_size)
    reader = fid_reader.build_reader(config)
    features = _features(self.tokenizer, config)
    batch = {k: tf.constant(v) for k, v in features._asdict().items()}
    step = _train_step(reader, 3e-3)
    first = float(step(batch)["loss"])
    for _ in range(60):
      last = float(step(batch)["loss"])
    self.assertLess(last, 0.5 * first)
    decoded = reader.greedy_decode(features.passage_ids, features.passage_mask, self.tokenizer.cls_id)
    self.assertEqual(["abc 12", "xyz"],
                     [fid_features.detokenize(self.tokenizer, row) for row in decoded.numpy()])
    self.assertEqual([True, True],
                     evaluation.wordpiece_exact_match(self.tokenizer, decoded.numpy(),
                                                      [["ABC 12"], ["xyz", "w"]]))
    self.assertEqual([False], evaluation.wordpiece_exact_match(self.tokenizer,
                                                               decoded.numpy()[:1], [["abc"]]))

  def test_passage_scores_are_first_token_cross_attention(self):
    config = _tiny_config(self.tokenizer.vocab_size)
    reader = fid_reader.build_reader(config)
    features = _features(self.tokenizer, config)
    scores = reader.passage_scores(features.passage_ids, features.passage_mask, self.tokenizer.cls_id)
    self.assertEqual((2, 2), scores.shape)
    # The first position of a full teacher-forced pass has the same cross-attention (causal decoder).
    memory, memory_mask = reader.encode(features.passage_ids, features.passage_mask)
    _, cross = reader.decode(features.decoder_input_ids, memory, memory_mask)
    self.assertEqual((2, 2, 2, 6, 48), cross.shape)
    expected = fid_reader.aggregate_cross_attention(cross[:, :, :, 0], features.passage_mask)
    self.assertAllClose(expected, scores, atol=1e-5)
    mass = reader.passage_scores(features.passage_ids, features.passage_mask, self.tokenizer.cls_id,
                                 "attention_mass")
    self.assertAllClose(fid_reader.aggregate_attention_mass(cross[:, :, :, 0], features.passage_mask),
                        mass,
                        atol=1e-5)
    with self.assertRaisesRegex(ValueError, "unknown reader score aggregation"):
      reader.passage_scores(features.passage_ids, features.passage_mask, self.tokenizer.cls_id, "max")
    later = fid_reader.aggregate_cross_attention(cross[:, :, :, 1], features.passage_mask)
    self.assertGreater(np.abs(later - scores).max(), 1e-5)


def _random_bert(config: bert.BertConfig, seed: int):
  """A built BertEncoderV2 whose every weight is random (LayerNorm and biases too), so that a load that
  missed a weight shows."""
  encoder = bert.build_encoder(config)
  ids = tf.zeros([1, 1], tf.int32)
  encoder(bert.encoder_inputs(ids, tf.ones_like(ids), ids))
  rng = np.random.default_rng(seed)
  for variable in encoder.weights:
    variable.assign(rng.normal(0.0, 0.1, variable.shape).astype(np.float32))
  return encoder


class BertEncoderReaderTest(_Seeded):
  """The FiD reader with a warm-started BERT encoder (FidConfig.encoder = "bert")."""

  def _bert_config(self, vocab_size=None):
    return bert.tiny_config(vocab_size or self.tokenizer.vocab_size,
                            hidden_size=32,
                            num_layers=1,
                            intermediate_size=64,
                            max_position_embeddings=64)

  def _write_train_mlm_export(self, config, seed=1):
    """bin/train_mlm's MODEL_DIR/bert layout: a Model Garden checkpoint (encoder/, masked_lm/), the
    checkpoint index file and bert_config.json."""
    source = _random_bert(config, seed)
    directory = os.path.join(self.get_temp_dir(), f"mlm_export_{seed}")
    tf.io.gfile.makedirs(directory)
    tf.train.Checkpoint(encoder=source).write(os.path.join(directory, "ckpt-7"))
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as f:
      f.write('model_checkpoint_path: "ckpt-7"\n')
    with open(os.path.join(directory, "bert_config.json"), "w", encoding="utf-8") as f:
      json.dump(config.to_dict(), f)
    return source, directory

  def _write_tf1_checkpoint(self, config, seed=2):
    """Google's TF1 BERT layout (bert/encoder/layer_0/..., fused head kernels) and bert_config.json."""
    source = _random_bert(config, seed)
    # pylint: disable=protected-access (the converter's own name and shape map, read backwards)
    variables = {
        t.source_name: t.variable.numpy().reshape(t.source_shape)
        for t in bert_mapping._encoder_targets(source, "bert/")
    }
    directory = os.path.join(self.get_temp_dir(), f"tf1_{seed}")
    tf.io.gfile.makedirs(directory)
    path = released_weights.write_tf1_checkpoint(os.path.join(directory, "bert_model.ckpt"), variables)
    with open(os.path.join(directory, "bert_config.json"), "w", encoding="utf-8") as f:
      json.dump(
          {
              "vocab_size": config.vocab_size,
              "hidden_size": config.hidden_size,
              "num_hidden_layers": config.num_layers,
              "num_attention_heads": config.num_attention_heads,
              "intermediate_size": config.intermediate_size,
              "hidden_act": "gelu",
              "max_position_embeddings": config.max_position_embeddings
          }, f)
    return source, path

  def _reader(self, checkpoint, hidden_size):
    bert_config = fid_warm_start.bert_encoder_config(checkpoint, self.tokenizer.vocab_size)
    config = _tiny_config(self.tokenizer.vocab_size,
                          hidden_size=hidden_size,
                          encoder="bert",
                          bert=bert_config)
    reader = fid_reader.build_reader(config)
    fid_warm_start.load_encoder_weights(reader, checkpoint)
    return config, reader

  def _assert_same_weights(self, source, encoder):
    self.assertLen(encoder.weights, len(source.weights))
    for a, b in zip(source.weights, encoder.weights):
      self.assertAllClose(a.numpy(), b.numpy(), atol=0, rtol=0, msg=b.name)

  def test_train_mlm_export_sets_the_encoder_and_the_reader_runs_with_a_projection(self):
    source, directory = self._write_train_mlm_export(self._bert_config())
    config, reader = self._reader(directory, hidden_size=16)  # BERT 32 -> decoder 16: a projection
    self._assert_same_weights(source, reader.bert_encoder)
    self.assertIsNotNone(reader.encoder_projection)
    features = _features(self.tokenizer, config)
    memory, memory_mask = reader.encode(features.passage_ids, features.passage_mask)
    self.assertEqual((2, 2 * config.passage_seq_len, 16), tuple(memory.shape))
    self.assertEqual((2, 2 * config.passage_seq_len), tuple(memory_mask.shape))
    # The encoder's output is the loaded BERT's (then projected): the memory of pair 0 is the projection
    # of the source encoder's sequence output on it.
    ids = features.passage_ids[:, 0]
    mask = features.passage_mask[:, 0]
    expected = reader.encoder_projection(
        source(bert.encoder_inputs(ids, mask, np.zeros_like(ids)), training=False)["sequence_output"])
    self.assertAllClose(expected, memory[:, :config.passage_seq_len], atol=1e-5)
    # Loss, gradients into the BERT encoder, greedy decoding and the cross-attention scores.
    batch = {k: tf.constant(v) for k, v in features._asdict().items()}
    with tf.GradientTape() as tape:
      output = reader.compute_loss(batch, training=True)
    self.assertGreater(float(output.loss_sum), 0.0)
    gradients = tape.gradient(output.loss_sum, reader.bert_encoder.trainable_variables)
    self.assertGreater(max(float(tf.reduce_max(tf.abs(g))) for g in gradients if g is not None), 0.0)
    decoded = reader.greedy_decode(features.passage_ids, features.passage_mask, self.tokenizer.cls_id)
    self.assertEqual((2, config.answer_seq_len), tuple(decoded.shape))
    for aggregation in fid_reader.SCORE_AGGREGATIONS:
      scores = reader.passage_scores(features.passage_ids, features.passage_mask, self.tokenizer.cls_id,
                                     aggregation)
      self.assertEqual((2, 2), tuple(scores.shape))
      self.assertTrue(np.isfinite(scores.numpy()).all())

  def test_tf1_checkpoint_sets_the_encoder_and_the_reader_checkpoint_round_trips(self):
    source, path = self._write_tf1_checkpoint(self._bert_config())
    config, reader = self._reader(path, hidden_size=32)  # same width: no projection
    self._assert_same_weights(source, reader.bert_encoder)
    self.assertIsNone(reader.encoder_projection)
    features = _features(self.tokenizer, config)
    saved = tf.train.Checkpoint(model=reader).write(os.path.join(self.get_temp_dir(), "reader", "ckpt"))
    restored = fid_reader.build_reader(config)
    tf.train.Checkpoint(model=restored).read(saved).assert_consumed()
    inputs = (features.passage_ids, features.passage_mask, features.decoder_input_ids)
    self.assertAllClose(reader(inputs, training=False), restored(inputs, training=False))

  def test_shared_embeddings_are_the_encoders_word_embeddings(self):
    source, directory = self._write_train_mlm_export(self._bert_config())
    bert_config = fid_warm_start.bert_encoder_config(directory, self.tokenizer.vocab_size)
    config = _tiny_config(self.tokenizer.vocab_size,
                          hidden_size=32,
                          encoder="bert",
                          bert=bert_config,
                          share_embeddings=True)
    reader = fid_reader.build_reader(config)
    fid_warm_start.load_encoder_weights(reader, directory)
    self.assertIsNone(reader.token_embedding)
    table = reader.bert_encoder.get_embedding_table()
    self.assertAllClose(source.get_embedding_table(), table, atol=0, rtol=0)
    # No second table: the reader holds exactly the encoder's vocab-sized variable.
    vocab_sized = [v for v in reader.trainable_variables if v.shape[0] == self.tokenizer.vocab_size]
    self.assertLen(vocab_sized, 1)
    # The softmax is the table: the logit of every wordpiece is the final decoder state . its embedding.
    features = _features(self.tokenizer, config)
    memory, memory_mask = reader.encode(features.passage_ids, features.passage_mask)
    logits, _ = reader.decode(features.decoder_input_ids, memory, memory_mask)
    self.assertEqual((2, config.answer_seq_len, self.tokenizer.vocab_size), tuple(logits.shape))
    moved = table.numpy().copy()
    moved[features.target_ids[0, 0]] *= 2.0
    table.assign(moved)
    logits2, _ = reader.decode(features.decoder_input_ids, memory, memory_mask)
    # Doubling one row changes the decoder's input at the positions reading that id, so compare only
    # position 0 (its input is [CLS], not the doubled id): the logit doubles, the others stay.
    target = int(features.target_ids[0, 0])
    self.assertAllClose(2.0 * logits[0, 0, target], logits2[0, 0, target], rtol=1e-5)
    others = np.delete(np.arange(self.tokenizer.vocab_size), target)
    self.assertAllClose(tf.gather(logits[0, 0], others), tf.gather(logits2[0, 0], others), rtol=1e-5)
    # Decoder loss gradients reach the shared table.
    batch = {k: tf.constant(v) for k, v in features._asdict().items()}
    with tf.GradientTape() as tape:
      output = reader.compute_loss(batch, training=True)
    self.assertIsNotNone(tape.gradient(output.loss_sum, table))
    with self.assertRaisesRegex(ValueError, "share_embeddings needs the decoder as wide.*16.*32"):
      _tiny_config(self.tokenizer.vocab_size,
                   hidden_size=16,
                   encoder="bert",
                   bert=bert_config,
                   share_embeddings=True)
    with self.assertRaisesRegex(ValueError, "share_embeddings.*needs encoder 'bert'"):
      _tiny_config(self.tokenizer.vocab_size, share_embeddings=True)

  def test_checkpoint_of_another_vocabulary_is_refused(self):
    _, directory = self._write_train_mlm_export(self._bert_config(vocab_size=self.tokenizer.vocab_size + 5))
    with self.assertRaisesRegex(
        ValueError, "--reader_init_checkpoint=.*vocabulary of "
        f"{self.tokenizer.vocab_size + 5} wordpieces.*--vocab_path"):
      fid_warm_start.bert_encoder_config(directory, self.tokenizer.vocab_size)
    with self.assertRaisesRegex(ValueError, "--reader_init_checkpoint=.*not a BERT checkpoint"):
      fid_warm_start.bert_encoder_config(os.path.join(self.get_temp_dir(), "missing"),
                                         self.tokenizer.vocab_size)

  def test_config_round_trip_and_checks(self):
    config = _tiny_config(self.tokenizer.vocab_size, encoder="bert", bert=self._bert_config())
    config.save(self.get_temp_dir())
    loaded = fid_reader.FidConfig.load(self.get_temp_dir())
    self.assertEqual(config, loaded)
    self.assertIsInstance(loaded.bert, bert.BertConfig)
    self.assertEqual(config, config.save_or_check(self.get_temp_dir()))
    with self.assertRaisesRegex(ValueError, "another FiD reader configuration.*bert"):
      _tiny_config(self.tokenizer.vocab_size).save_or_check(self.get_temp_dir())
    with self.assertRaisesRegex(ValueError, "vocab_size"):
      _tiny_config(self.tokenizer.vocab_size + 1, encoder="bert", bert=self._bert_config())
    with self.assertRaisesRegex(ValueError, "BERT configuration is needed"):
      _tiny_config(self.tokenizer.vocab_size, encoder="bert")
    with self.assertRaisesRegex(ValueError, "max_position_embeddings 64"):
      _tiny_config(self.tokenizer.vocab_size, encoder="bert", bert=self._bert_config(), passage_seq_len=96)
    with self.assertRaisesRegex(ValueError, "encoder must be one of"):
      _tiny_config(self.tokenizer.vocab_size, encoder="gpt")


class CopyAttentionTest(_Seeded):
  """FidConfig.copy_attention: the pointer-generator mixture."""

  def test_mixture_is_a_distribution_and_copy_is_the_last_layers_attention(self):
    config = _tiny_config(self.tokenizer.vocab_size, copy_attention=True)
    reader = fid_reader.build_reader(config)
    features = _features(self.tokenizer, config)
    memory, memory_mask = reader.encode(features.passage_ids, features.passage_mask)
    memory_ids = features.passage_ids.reshape([2, -1])
    logits, cross = reader.decode(features.decoder_input_ids, memory, memory_mask, memory_ids)
    self.assertAllClose(np.zeros([2, config.answer_seq_len]), tf.reduce_logsumexp(logits, -1), atol=1e-4)
    # Gate closed (generate nothing): p(v) = the last layer's head-mean attention on v's positions.
    reader.copy_gate.bias.assign([-60.0])
    logits, cross = reader.decode(features.decoder_input_ids, memory, memory_mask, memory_ids)
    probabilities = np.exp(logits.numpy())
    bias = (1.0 - memory_mask.numpy())[:, None, None, :] * -1e9
    attention = tf.nn.softmax(cross[:, -1].numpy() + bias, axis=-1).numpy().mean(axis=1)  # [B, T, M]
    for b in range(2):
      ids = memory_ids[b][memory_mask.numpy()[b] > 0]
      for v in set(ids.tolist()):
        expected = attention[b][:, (memory_ids[b] == v) & (memory_mask.numpy()[b] > 0)].sum(axis=-1)
        self.assertAllClose(expected, probabilities[b, :, v], atol=1e-5)
      absent = np.setdiff1d(np.arange(self.tokenizer.vocab_size), ids)
      self.assertLess(float(probabilities[b][:, absent].sum(axis=-1).max()), 1e-4)
    # The loss trains the cross-attention through the copy path alone (gate closed).
    batch = {k: tf.constant(v) for k, v in features._asdict().items()}
    with tf.GradientTape() as tape:
      output = reader.compute_loss(batch, training=True)
    gradient = tape.gradient(output.loss_sum, reader.decoder_layers[-1].cross_attention.query.kernel)
    self.assertGreater(float(tf.reduce_max(tf.abs(gradient))), 0.0)

  def test_decode_without_memory_ids_is_refused(self):
    config = _tiny_config(self.tokenizer.vocab_size, copy_attention=True)
    reader = fid_reader.build_reader(config)
    features = _features(self.tokenizer, config)
    memory, memory_mask = reader.encode(features.passage_ids, features.passage_mask)
    with self.assertRaisesRegex(ValueError, "copy_attention needs memory_ids"):
      reader.decode(features.decoder_input_ids, memory, memory_mask)

  def test_copy_reader_learns_to_copy_an_answer_it_never_saw(self):
    """Trained on answers copied from their passage, it copies names it never emitted; without the pointer
    the same reader cannot (their output embeddings never got a gradient)."""
    names = [f"name{i}" for i in range(60)]  # whole-word pieces: each answer is one wordpiece
    tokenizer = tokenization.Tokenizer(
        tiny_inputs.write_vocab(self.get_temp_dir(),
                                tiny_inputs.tiny_vocab_tokens() + names,
                                name="names_vocab.txt"))
    rng = np.random.default_rng(0)

    def draw(pool, size):
      questions, passages, answers = [], [], []
      for _ in range(size):
        answer, filler = rng.choice(pool, 2, replace=False)
        questions.append("who is it?")
        passages.append([("t", f"{filler} is not it. it is {answer}")])
        answers.append(str(answer))
      return questions, passages, answers

    def features(drawn, config):
      questions, passages, answers = drawn
      examples = fid_features.tokenize_examples(tokenizer, questions, passages, answers)
      return fid_features.pad_examples(tokenizer, examples, config.passage_seq_len,
                                       config.answer_seq_len), answers

    def reader_config(copy_attention):
      # 48 holds the whole passage (the tiny vocab spells "who" as 3 pieces).
      return _tiny_config(tokenizer.vocab_size,
                          copy_attention=copy_attention,
                          passage_seq_len=48,
                          answer_seq_len=4)

    # 40 steps of 16 (640 examples) already give ~0.9 held-out exact match with the pointer (100 steps
    # gave the same); both readers train on the same batches, tokenized once in one call (the
    # tokenizer's cost is per call, and the padded features depend only on the sequence lengths, which
    # both configurations share).
    steps, batch_size = 40, 16
    train, _ = features(draw(names[:40], steps * batch_size), reader_config(True))
    held_out, answers = features(draw(names[40:], 32), reader_config(True))

    def held_out_exact_match(copy_attention):
      tf_keras.utils.set_random_seed(7)
      reader = fid_reader.build_reader(reader_config(copy_attention))
      step = _train_step(reader, 3e-3)
      for s in range(steps):
        step({k: tf.constant(v[s * batch_size:(s + 1) * batch_size]) for k, v in train._asdict().items()})
      decoded = reader.greedy_decode(held_out.passage_ids, held_out.passage_mask, tokenizer.cls_id)
      return float(
          np.mean(evaluation.wordpiece_exact_match(tokenizer, decoded.numpy(), [[a] for a in answers])))

    self.assertGreaterEqual(held_out_exact_match(copy_attention=True), 0.8)
    self.assertLessEqual(held_out_exact_match(copy_attention=False), 0.1)


class PositionsAndInitializationTest(tf.test.TestCase):

  def test_encoder_sees_word_order(self):
    tf_keras.utils.set_random_seed(3)
    reader = fid_reader.build_reader(_tiny_config(40, passage_seq_len=6))
    ids = tf.constant([[[5, 6, 7, 8, 9, 10]]])
    swapped = tf.constant([[[6, 5, 7, 8, 9, 10]]])
    memory, _ = reader.encode(ids, tf.ones_like(ids))
    other, _ = reader.encode(swapped, tf.ones_like(ids))
    # Without positions the outputs would only be permuted; with them, token 7 (unchanged, same place)
    # sees a different context.
    self.assertGreater(float(tf.reduce_max(tf.abs(memory[0, 2] - other[0, 2]))), 1e-3)

  def test_t5_initialization_scale(self):
    tf_keras.utils.set_random_seed(3)
    config = _tiny_config(40, hidden_size=64)
    reader = fid_reader.build_reader(config)
    kernel = reader.decoder_layers[0].cross_attention.query.kernel.numpy()
    self.assertAllClose(64**-0.5, kernel.std(), rtol=0.1)
    self.assertAllClose(1.0, reader.token_embedding.embeddings.numpy().std(), rtol=0.1)


if __name__ == "__main__":
  tf.test.main()
