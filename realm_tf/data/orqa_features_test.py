"""Tests of ORQA's reader features: packing and truncation, gold spans (every occurrence, block region
only, -1 padding), the two answer tests, byte-offset answer extraction with accents, and that the dense
form compiles with XLA (the ORQA train step runs it inside jit_compile)."""

import os

import numpy as np
import tensorflow as tf

from realm_tf import featurization
from realm_tf import tokenization
from realm_tf.data import orqa_features
from realm_tf.testing import test_paths

_VOCAB = os.path.join(test_paths.repo_root(), "testdata", "vocab.txt")
_CLS, _SEP = 2, 3


def _tokenizer():
  return tokenization.Tokenizer(_VOCAB)


class PackReaderInputsTest(tf.test.TestCase):

  def _pack(self, question, blocks, seq_len):
    block_width = max(len(b) for b in blocks)
    block_ids = np.zeros([1, len(blocks), block_width], np.int32)
    for k, block in enumerate(blocks):
      block_ids[0, k, :len(block)] = block
    return orqa_features.pack_reader_inputs(tf.constant([question + [0]], tf.int32),
                                            tf.constant([len(question)]), tf.constant(block_ids),
                                            tf.constant([[len(b) for b in blocks]]), seq_len, _CLS, _SEP)

  def test_layout_and_block_truncation(self):
    inputs = self._pack([5, 6], [[7, 8, 9], [10, 11, 12, 13, 14]], seq_len=9)
    self.assertAllEqual(inputs.token_ids[0],
                        [[_CLS, 5, 6, _SEP, 7, 8, 9, _SEP, 0], [_CLS, 5, 6, _SEP, 10, 11, 12, 13, _SEP]])
    self.assertAllEqual(inputs.mask[0], [[1] * 8 + [0], [1] * 9])
    self.assertAllEqual(inputs.segment_ids[0], [[0, 0, 0, 0, 1, 1, 1, 1, 0], [0] * 4 + [1] * 5])
    self.assertAllEqual(inputs.block_mask[0], [[0] * 4 + [1] * 3 + [0] * 2, [0] * 4 + [1] * 4 + [0]])
    self.assertAllEqual(inputs.block_start[0], [4, 4])
    self.assertAllEqual(inputs.block_length[0], [3, 4])

  def test_question_keeps_what_fits(self):
    """A question longer than L - 3 keeps L - 3 pieces and leaves no room for the block."""
    inputs = self._pack([5, 6, 7, 8, 9, 10], [[11, 12]], seq_len=6)
    self.assertAllEqual(inputs.token_ids[0, 0], [_CLS, 5, 6, 7, _SEP, _SEP])
    self.assertAllEqual(inputs.block_mask[0, 0], [0] * 6)
    self.assertAllEqual(inputs.block_length[0], [0])


class GoldSpansTest(tf.test.TestCase):

  def test_every_occurrence_in_block_region_only(self):
    # [CLS] 7 8 [SEP] 7 8 9 7 8 [SEP]: the question's "7 8" is not gold, both block ones are.
    inputs = orqa_features.pack_reader_inputs(tf.constant([[7, 8]]), tf.constant([2]),
                                              tf.constant([[[7, 8, 9, 7, 8], [9, 9, 9, 9, 9]]]),
                                              tf.constant([[5, 5]]), 10, _CLS, _SEP)
    answer_ids = tf.constant([[[7, 8], [9, 0], [0, 0]]])  # answers "7 8", "9", and padding
    answer_len = tf.constant([[2, 1, 0]])
    starts, ends = orqa_features.reader_gold_spans(inputs, answer_ids, answer_len, max_answers=4)
    # By answer, then position; the second block has five "9"s but keeps max_answers of them.
    self.assertAllEqual(starts[0], [[4, 7, 6, -1], [4, 5, 6, 7]])
    self.assertAllEqual(ends[0], [[5, 8, 6, -1], [4, 5, 6, 7]])

  def test_match_must_end_inside_block(self):
    """An answer cut by truncation is no gold span (its last piece is past the block)."""
    inputs = orqa_features.pack_reader_inputs(tf.constant([[5]]), tf.constant([1]), tf.constant([[[6, 7,
                                                                                                   8]]]),
                                              tf.constant([[3]]), 6, _CLS, _SEP)  # room for 6 7 only
    starts, _ = orqa_features.reader_gold_spans(inputs, tf.constant([[[7, 8]]]), tf.constant([[2]]), 2)
    self.assertAllEqual(starts[0, 0], [-1, -1])

  def test_contains_answer(self):
    block_ids = tf.constant([[[1, 2, 3, 0], [3, 2, 1, 0]]])
    found = orqa_features.contains_answer(block_ids, tf.constant([[3, 3]]), tf.constant([[[2, 3]]]),
                                          tf.constant([[2]]))
    self.assertAllEqual(found, [[True, False]])
    # Padding beyond a block's length is not part of it.
    found = orqa_features.contains_answer(block_ids, tf.constant([[2, 3]]), tf.constant([[[3, 0]]]),
                                          tf.constant([[1]]))
    self.assertAllEqual(found, [[False, True]])

  def test_dense_form_compiles_with_xla(self):

    @tf.function(jit_compile=True)
    def labels(question, question_len, blocks, block_len, answers, answer_len):
      inputs = orqa_features.pack_reader_inputs(question, question_len, blocks, block_len, 12, _CLS, _SEP)
      starts, ends = orqa_features.reader_gold_spans(inputs, answers, answer_len, 3)
      return inputs.token_ids, starts, ends, orqa_features.contains_answer(blocks, block_len, answers,
                                                                           answer_len)

    args = (tf.constant([[5, 6]]), tf.constant([2]), tf.constant([[[7, 8, 9], [8, 9, 0]]]),
            tf.constant([[3, 2]]), tf.constant([[[8, 9]]]), tf.constant([[2]]))
    token_ids, starts, ends, found = labels(*args)
    self.assertAllEqual(token_ids[0, 1, :8], [_CLS, 5, 6, _SEP, 8, 9, _SEP, 0])
    self.assertAllEqual(starts[0], [[5, -1, -1], [4, -1, -1]])
    self.assertAllEqual(ends[0], [[6, -1, -1], [5, -1, -1]])
    self.assertAllEqual(found, [[True, True]])


class TextFeaturesTest(tf.test.TestCase):

  def test_gold_spans_point_at_the_answer_text(self):
    tokenizer = _tokenizer()
    blocks = [["Wenor founded the Kelarlé Workshop. The Kelarlé Workshop burned.", "Nothing to see here."]]
    features = orqa_features.reader_inputs_from_texts(tokenizer, ["What did Wenor found?"],
                                                      blocks,
                                                      seq_len=40,
                                                      answers=tf.ragged.constant([["Kelarlé Workshop"]]))
    starts, ends = features.gold_starts.numpy(), features.gold_ends.numpy()
    self.assertEqual(starts[0, 0, 2], -1)
    self.assertAllEqual(starts[0, 1], [-1] * 10)
    text = blocks[0][0].encode("utf-8")
    found = [
        text[features.byte_starts[0, 0, s]:features.byte_limits[0, 0, e]].decode("utf-8")
        for s, e in zip(starts[0, 0, :2], ends[0, 0, :2])
    ]
    self.assertEqual(found, ["Kelarlé Workshop", "Kelarlé Workshop"])
    self.assertAllEqual(features.retriever_correct, [[True, False]])
    # Positions outside the block have no bytes.
    self.assertEqual(features.byte_starts[0, 0, 0], -1)

  def test_raw_substring_test_is_case_sensitive_and_literal(self):
    found = orqa_features.has_answer_strings(
        [["Paris is big", "paris", "a+b (c)"], ["x", "y", "Café au lait"]],
        tf.ragged.constant([["Paris", "a+b (c)"], ["Café"]]))
    self.assertAllEqual(found, [[True, False, True], [False, False, True]])

  def test_extract_answers_slices_the_original_text(self):
    tokenizer = _tokenizer()
    texts = ["Zoë Kelarlé lived in Café Ünter.", "Wenor founded it.", "x"]
    # Pieces: z ##o ##e | kel ##ar ##le | ... ; "Zoë Kelarlé" is pieces 0..5.
    pieces = tokenizer.tokenize_texts(texts[:1])[0]
    last = [
        i for i, (s, l) in enumerate(zip(pieces.starts, pieces.limits))
        if texts[0].encode()[s:l].decode() == "lé"
    ][0]
    answers = orqa_features.extract_answers(tokenizer, texts, [0, 0, 3], [last, 0, 5])
    self.assertEqual([a.decode("utf-8") for a in answers.numpy()], ["Zoë Kelarlé", "Wen", ""])


class QaDatasetTest(tf.test.TestCase):

  def test_batches_and_answer_ids(self):
    tokenizer = _tokenizer()
    featurizer = featurization.Featurizer.from_tokenizer(tokenizer,
                                                         query_seq_len=8,
                                                         candidate_seq_len=16,
                                                         max_masks=2)
    data = orqa_features.qa_dataset(["Where was Savix Lunene born?", "Who?", "What?"],
                                    [["Rosysmer"], ["Wenor", "Thalis Wenor"], ["x"]],
                                    tokenizer,
                                    featurizer,
                                    reader_seq_len=20,
                                    batch_size=2,
                                    max_num_answers=3,
                                    max_answer_len=4,
                                    repeat=False)
    batches = list(data)
    self.assertLen(batches, 2)  # 3 examples, the last batch padded with the first
    first = batches[0]
    self.assertEqual(first["query_token_ids"].shape, [2, 8])
    self.assertEqual(first[orqa_features.QUESTION_IDS].shape, [2, 17])
    self.assertEqual(first[orqa_features.ANSWER_IDS].shape, [2, 3, 4])
    lengths = [len(ids) for ids in tokenizer.tokenize(["Rosysmer", "Wenor", "Thalis Wenor"]).to_list()]
    self.assertAllEqual(first[orqa_features.ANSWER_LEN],
                        [[lengths[0], 0, 0], [lengths[1], min(lengths[2], 4), 0]])
    self.assertAllEqual(first[orqa_features.ANSWER_IDS][1, 0, :2], tokenizer.tokenize(["Wenor"]).to_list()[0])
    self.assertAllEqual(batches[1][orqa_features.QUESTION_IDS][1], first[orqa_features.QUESTION_IDS][0])


if __name__ == "__main__":
  tf.test.main()
