"""Tests of the FiD reader's input featurization (realm_tf.data.fid_features)."""

import tensorflow as tf

from realm_tf import tokenization
from realm_tf.data import fid_features
from realm_tf.testing import tiny_inputs


def features(tokenizer, passage_seq_len=24, answer_seq_len=6, answers=("abc 12", "xyz")):
  """Two questions with two passages each (the tiny test vocab spells most words letter by letter, so
  L = 24 truncates inside the title)."""
  questions = ["who is abc?", "what is xyz?"]
  passages = [[("t1", "abc 12 is here"), ("t2", "nothing")], [("t3", "xyz there"), ("t4", "padding")]]
  examples = fid_features.tokenize_examples(tokenizer, questions, passages, list(answers))
  return fid_features.pad_examples(tokenizer, examples, passage_seq_len, answer_seq_len)


class FeaturizeTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.tokenizer = tokenization.Tokenizer(tiny_inputs.write_vocab(self.get_temp_dir()))

  def test_featurize_shapes_and_teacher_forcing(self):
    tok = self.tokenizer
    got = features(tok)
    self.assertEqual((2, 2, 24), got.passage_ids.shape)
    self.assertEqual((2, 6), got.target_ids.shape)
    # Decoder input is the target shifted right behind [CLS]; the target ends with [SEP].
    self.assertEqual(tok.cls_id, got.decoder_input_ids[0, 0])
    length = int(got.target_mask[1].sum())
    self.assertEqual(tok.sep_id, got.target_ids[1, length - 1])
    self.assertAllEqual(got.target_ids[1, :length - 1], got.decoder_input_ids[1, 1:length])
    # The pair is formatted as FiD's "question: ... title: ... context: ..." and truncated at L.
    self.assertEqual(24, got.passage_mask[0, 0].sum())
    self.assertEqual("question : who is abc ? title : t", fid_features.detokenize(tok, got.passage_ids[0, 0]))
    long = features(tok, passage_seq_len=64)
    self.assertEqual("question : who is abc ? title : t1 context : abc 12 is here",
                     fid_features.detokenize(tok, long.passage_ids[0, 0]))
    self.assertLess(long.passage_mask[0, 0].sum(), 64)

  def test_prediction_features_have_no_targets(self):
    examples = fid_features.tokenize_examples(self.tokenizer, ["q"], [[("t", "b")]])
    got = fid_features.pad_examples(self.tokenizer, examples, 16, 4, with_answers=False)
    self.assertEqual(0, got.target_mask.sum())
    self.assertEqual(self.tokenizer.cls_id, got.decoder_input_ids[0, 0])
    with self.assertRaisesRegex(ValueError, "same number of passages"):
      fid_features.tokenize_examples(self.tokenizer, ["q", "r"], [[("t", "b")], []])


if __name__ == "__main__":
  tf.test.main()
