"""Tests for realm_tf.featurization: BERT packing and salient-span masking, checked against hand-computed
arrays, plus an end-to-end case with the real tokenizer and a tf.data pipeline."""

import os

import tensorflow as tf

from realm_tf import featurization
from realm_tf import tokenization

MaskingStatus = featurization.MaskingStatus

CLS, SEP, MASK = 101, 102, 103
OK = int(MaskingStatus.OK)
NO_PIECE = int(MaskingStatus.SPAN_COVERS_NO_WORDPIECE)
TRUNCATED = int(MaskingStatus.MASK_WOULD_BE_TRUNCATED)

# Vocab of the end-to-end tests; the ids are the line numbers minus one.
E2E_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",  # 0-4
    "i",
    "love",
    "the",
    "cafe",
    "##s",  # 5-9
    "of",
    "zu",
    "##rich",
    ".",
    "paris",  # 10-14
    "is",
    "big"
]  # 15-16
SENTENCE = "I love the cafés of Zürich."
# Its wordpieces:  i    love   the     cafe     ##s      of       zu       ##rich   .
SENTENCE_IDS = [5, 6, 7, 8, 9, 10, 11, 12, 13]
SENTENCE_STARTS = [0, 2, 7, 11, 16, 18, 21, 24, 28]
SENTENCE_LIMITS = [1, 6, 10, 16, 17, 20, 24, 28, 29]


def _featurizer(query_seq_len=8, candidate_seq_len=8, max_masks=3):
  return featurization.Featurizer(CLS,
                                  SEP,
                                  MASK,
                                  query_seq_len=query_seq_len,
                                  candidate_seq_len=candidate_seq_len,
                                  max_masks=max_masks)


class BertFormatTest(tf.test.TestCase):

  def assertInputs(self, inputs, token_ids, mask, segment_ids):
    self.assertEqual(inputs.token_ids.dtype, tf.int32)
    self.assertEqual(inputs.mask.dtype, tf.int32)
    self.assertEqual(inputs.segment_ids.dtype, tf.int32)
    self.assertAllEqual(inputs.token_ids, token_ids)
    self.assertAllEqual(inputs.mask, mask)
    self.assertAllEqual(inputs.segment_ids, segment_ids)

  def test_one_segment_with_padding(self):
    self.assertInputs(_featurizer().bert_format([[[5, 6, 7]]], 6),
                      token_ids=[[CLS, 5, 6, 7, SEP, 0]],
                      mask=[[1, 1, 1, 1, 1, 0]],
                      segment_ids=[[0, 0, 0, 0, 0, 0]])

  def test_one_segment_truncated(self):
    # Budget 5 - 1 - 1 = 3 pieces.
    self.assertInputs(_featurizer().bert_format([[[5, 6, 7, 8, 9]]], 5),
                      token_ids=[[CLS, 5, 6, 7, SEP]],
                      mask=[[1, 1, 1, 1, 1]],
                      segment_ids=[[0, 0, 0, 0, 0]])

  def test_two_segments_with_padding(self):
    self.assertInputs(_featurizer().bert_format([[[5, 6]], [[7, 8]]], 8),
                      token_ids=[[CLS, 5, 6, SEP, 7, 8, SEP, 0]],
                      mask=[[1, 1, 1, 1, 1, 1, 1, 0]],
                      segment_ids=[[0, 0, 0, 0, 1, 1, 1, 0]])

  def test_second_segment_truncated(self):
    # Budget 8 - 1 - 2 = 5: s1 keeps 2, s2 gets the remaining 3 of 4.
    self.assertInputs(_featurizer().bert_format([[[5, 6]], [[7, 8, 9, 10]]], 8),
                      token_ids=[[CLS, 5, 6, SEP, 7, 8, 9, SEP]],
                      mask=[[1, 1, 1, 1, 1, 1, 1, 1]],
                      segment_ids=[[0, 0, 0, 0, 1, 1, 1, 1]])

  def test_first_segment_alone_exceeds_budget(self):
    # Budget 7 - 1 - 2 = 4: s1 is cut to 4 pieces and s2 gets none, but keeps its [SEP].
    self.assertInputs(_featurizer().bert_format([[[5, 6, 7, 8, 9, 10]], [[11, 12]]], 7),
                      token_ids=[[CLS, 5, 6, 7, 8, SEP, SEP]],
                      mask=[[1, 1, 1, 1, 1, 1, 1]],
                      segment_ids=[[0, 0, 0, 0, 0, 0, 1]])

  def test_batch_rows_are_trimmed_independently(self):
    first = [[5], [5, 6, 7, 8, 9, 10], []]
    second = [[11, 12, 13], [11], [14]]
    self.assertInputs(_featurizer().bert_format([first, second], 7),
                      token_ids=[[CLS, 5, SEP, 11, 12, 13, SEP], [CLS, 5, 6, 7, 8, SEP, SEP],
                                 [CLS, SEP, 14, SEP, 0, 0, 0]],
                      mask=[[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]],
                      segment_ids=[[0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 1], [0, 0, 1, 1, 0, 0, 0]])

  def test_accepts_ragged_and_dense_inputs(self):
    f = _featurizer()
    expected = [[CLS, 5, 6, SEP, 7, SEP, 0, 0], [CLS, 8, 9, SEP, 10, SEP, 0, 0]]
    from_lists = f.bert_format([[[5, 6], [8, 9]], [[7], [10]]], 8)
    from_ragged = f.bert_format(
        [tf.ragged.constant([[5, 6], [8, 9]], tf.int32),
         tf.ragged.constant([[7], [10]], tf.int64)], 8)
    from_dense = f.bert_format([tf.constant([[5, 6], [8, 9]]), tf.constant([[7], [10]])], 8)
    for inputs in (from_lists, from_ragged, from_dense):
      self.assertAllEqual(inputs.token_ids, expected)
      self.assertAllEqual(inputs.segment_ids, [[0, 0, 0, 0, 1, 1, 0, 0]] * 2)

  def test_too_many_segments_for_max_len(self):
    with self.assertRaisesRegex(ValueError, "cannot hold 3 segments"):
      _featurizer().bert_format([[[1]], [[2]], [[3]]], 3)

  def test_constructor_validation(self):
    with self.assertRaisesRegex(ValueError, "at least 3"):
      _featurizer(query_seq_len=2)
    with self.assertRaisesRegex(ValueError, "at least 3"):
      _featurizer(candidate_seq_len=2)
    with self.assertRaisesRegex(ValueError, "max_masks must be positive"):
      _featurizer(max_masks=0)

  def test_query_inputs(self):
    f = _featurizer(query_seq_len=6)
    self.assertInputs(f.query_inputs([[5, 6, 7, 8, 9, 10], [5]]),
                      token_ids=[[CLS, 5, 6, 7, 8, SEP], [CLS, 5, SEP, 0, 0, 0]],
                      mask=[[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]],
                      segment_ids=[[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]])

  def test_candidate_inputs(self):
    f = _featurizer(candidate_seq_len=7)
    # Budget 7 - 3 = 4: the title [7, 8] is whole, the body [9, 10, 11] keeps 2; then a short body.
    self.assertInputs(f.candidate_inputs([[7, 8], [7]], [[9, 10, 11], [9]]),
                      token_ids=[[CLS, 7, 8, SEP, 9, 10, SEP], [CLS, 7, SEP, 9, SEP, 0, 0]],
                      mask=[[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]],
                      segment_ids=[[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0]])

  def test_the_candidate_function_is_traced_once_per_setting(self):
    # Another featurizer of the same settings (the refresher makes one per refresh) calls the function
    # the first traced; another length gets its own (reusing it would pack to the wrong length).
    f = _featurizer(candidate_seq_len=7)
    function = f.candidate_inputs_function()
    self.assertIs(_featurizer(candidate_seq_len=7).candidate_inputs_function(), function)
    self.assertIsNot(_featurizer(candidate_seq_len=6).candidate_inputs_function(), function)
    self.assertIsNot(_featurizer(candidate_seq_len=7, max_masks=2).candidate_inputs_function(), function)
    titles, bodies = tf.ragged.constant([[7, 8], [7]], tf.int64), tf.ragged.constant([[9, 10, 11], [9]],
                                                                                     tf.int64)
    for name, value in f.candidate_inputs(titles, bodies)._asdict().items():
      self.assertAllEqual(function(titles, bodies)[name], value, msg=name)

  def test_joint_inputs(self):
    f = _featurizer(query_seq_len=5, candidate_seq_len=6)
    self.assertEqual(f.joint_seq_len, 11)
    # The query keeps Q - 2 = 3 pieces, the body C - 2 = 4, although the joint budget (8) would fit more.
    self.assertInputs(f.joint_inputs([[20, 21, 22, 23, 24], [20]], [[30, 31, 32, 33, 34, 35], [30]]),
                      token_ids=[[CLS, 20, 21, 22, SEP, 30, 31, 32, 33, SEP, 0],
                                 [CLS, 20, SEP, 30, SEP, 0, 0, 0, 0, 0, 0]],
                      mask=[[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0]],
                      segment_ids=[[0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0], [0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0]])

  def test_joint_query_part_matches_query_inputs(self):
    f = _featurizer(query_seq_len=5, candidate_seq_len=6)
    query = [[20, 21, 22, 23, 24]]
    joint = f.joint_inputs(query, [[30]])
    self.assertAllEqual(joint.token_ids[:, :5], f.query_inputs(query).token_ids)

  def test_the_null_document_is_an_empty_title_and_body(self):
    # realm_input.assemble_candidates featurizes the learned null document this way, beside the real
    # candidates: [CLS] [SEP] [SEP], segments 0 0 1.
    f = _featurizer(candidate_seq_len=5)
    empty = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int64), tf.zeros([2], tf.int64))
    self.assertInputs(f.candidate_inputs(empty, empty),
                      token_ids=[[CLS, SEP, SEP, 0, 0]] * 2,
                      mask=[[1, 1, 1, 0, 0]] * 2,
                      segment_ids=[[0, 0, 1, 0, 0]] * 2)

  def _vocab(self, tokens):
    vocab_path = os.path.join(self.create_tempdir().full_path, "vocab.txt")
    with open(vocab_path, "w", encoding="utf-8") as f:
      f.write("\n".join(tokens) + "\n")
    return tokenization.Tokenizer(vocab_path)

  def test_from_tokenizer(self):
    tokenizer = self._vocab(["[PAD]", "x", "[MASK]", "[SEP]", "[CLS]", "[UNK]"])
    f = featurization.Featurizer.from_tokenizer(tokenizer, query_seq_len=3, candidate_seq_len=5, max_masks=1)
    self.assertEqual((f.cls_id, f.sep_id, f.mask_id), (4, 3, 2))
    self.assertAllEqual(f.query_inputs([[1, 1]]).token_ids, [[4, 1, 3]])

  def test_from_tokenizer_rejects_pad_not_at_zero(self):
    # Padding writes id 0, so a vocab whose [PAD] is elsewhere would pad with a real token.
    tokenizer = self._vocab(["x", "[MASK]", "[SEP]", "[CLS]", "[UNK]", "[PAD]"])
    with self.assertRaisesRegex(ValueError, r"vocab.txt: \[PAD\] must be the first token"):
      featurization.Featurizer.from_tokenizer(tokenizer, query_seq_len=3, candidate_seq_len=5, max_masks=1)


class MaskSalientSpanTest(tf.test.TestCase):

  # Pieces of a made-up sentence "the unaffable cat":  the  un  ##aff  ##able  cat
  IDS = [10, 20, 21, 22, 30]
  STARTS = [0, 4, 6, 9, 14]
  LIMITS = [3, 6, 9, 13, 17]

  def _mask(self, featurizer, rows, spans):
    ids, starts, limits = zip(*rows)
    return featurizer.mask_salient_span(list(ids), list(starts), list(limits), [s for s, _ in spans],
                                        [l for _, l in spans])

  def test_hand_computed_batch(self):
    row = (self.IDS, self.STARTS, self.LIMITS)
    out = self._mask(
        _featurizer(query_seq_len=10, max_masks=3),
        [row, row, row, row, ([40, 41], [0, 2], [1, 3])],
        [
            (4, 13),  # "unaffable": three pieces
            (5, 12),  # starts inside "un" and ends inside "##able": only "##aff"
            (4, 12),  # ends inside "##able": "un" "##aff"
            (1, 2),  # inside "the": nothing
            (0, 3)
        ])  # the whole of a 2-piece row
    self.assertIsInstance(out.token_ids, tf.RaggedTensor)
    self.assertEqual(out.token_ids.to_list(), [[10, MASK, MASK, MASK, 30], [10, 20, MASK, 22, 30],
                                               [10, MASK, MASK, 22, 30], [10, 20, 21, 22, 30], [MASK, MASK]])
    self.assertEqual(out.mlm_positions.dtype, tf.int32)
    self.assertEqual(out.mlm_targets.dtype, tf.int32)
    self.assertEqual(out.mlm_mask.dtype, tf.float32)
    self.assertEqual(out.status.dtype, tf.int32)
    # Positions count [CLS] as 0, hence piece index + 1.
    self.assertAllEqual(out.mlm_positions, [[2, 3, 4], [3, 0, 0], [2, 3, 0], [0, 0, 0], [1, 2, 0]])
    self.assertAllEqual(out.mlm_targets, [[20, 21, 22], [21, 0, 0], [20, 21, 0], [0, 0, 0], [40, 41, 0]])
    self.assertAllEqual(out.mlm_mask, [[1, 1, 1], [1, 0, 0], [1, 1, 0], [0, 0, 0], [1, 1, 0]])
    self.assertAllEqual(out.status, [OK, OK, OK, NO_PIECE, OK])

  def test_more_masked_pieces_than_max_masks(self):
    row = (self.IDS, self.STARTS, self.LIMITS)
    out = self._mask(_featurizer(query_seq_len=10, max_masks=2), [row], [(0, 17)])
    # Every piece becomes [MASK], only the first two are predicted.
    self.assertEqual(out.token_ids.to_list(), [[MASK] * 5])
    self.assertAllEqual(out.mlm_positions, [[1, 2]])
    self.assertAllEqual(out.mlm_targets, [[10, 20]])
    self.assertAllEqual(out.mlm_mask, [[1, 1]])
    self.assertAllEqual(out.status, [OK])

  def test_span_between_pieces_covers_nothing(self):
    row = (self.IDS, self.STARTS, self.LIMITS)
    # The space between "the" and "un", an empty span, a span past the end.
    out = self._mask(_featurizer(query_seq_len=10), [row, row, row], [(3, 4), (4, 4), (20, 30)])
    self.assertAllEqual(out.status, [NO_PIECE] * 3)
    self.assertEqual(out.token_ids.to_list(), [self.IDS] * 3)
    self.assertAllEqual(out.mlm_mask, [[0, 0, 0]] * 3)

  def test_truncation_boundary(self):
    # Q = 6 keeps Q - 2 = 4 pieces (indices 0..3): a mask on index 3 survives, on index 4 it is cut.
    ids = [50, 51, 52, 53, 54, 55]
    starts = [0, 2, 4, 6, 8, 10]
    limits = [1, 3, 5, 7, 9, 11]
    row = (ids, starts, limits)
    f = _featurizer(query_seq_len=6, max_masks=2)
    out = self._mask(f, [row, row, row, row], [(6, 7), (8, 9), (6, 9), (0, 1)])
    self.assertAllEqual(out.status, [OK, TRUNCATED, TRUNCATED, OK])
    self.assertAllEqual(out.mlm_positions, [[4, 0], [5, 0], [4, 5], [1, 0]])
    # The surviving mask is inside the packed query, at its predicted position.
    query = f.query_inputs(out.token_ids)
    self.assertAllEqual(query.token_ids[0], [CLS, 50, 51, 52, MASK, SEP])
    self.assertEqual(int(query.token_ids[0, out.mlm_positions[0, 0]]), MASK)
    self.assertAllEqual(query.token_ids[1], [CLS, 50, 51, 52, 53, SEP])  # its [MASK] was cut off

  def test_dense_span_shapes(self):
    # Spans given as [batch, 1] tensors work like [batch].
    row = (self.IDS, self.STARTS, self.LIMITS)
    f = _featurizer(query_seq_len=10, max_masks=1)
    out = f.mask_salient_span(tf.ragged.constant([row[0]]), tf.ragged.constant([row[1]]),
                              tf.ragged.constant([row[2]]), tf.constant([[14]]), tf.constant([[17]]))
    self.assertAllEqual(out.mlm_positions, [[5]])
    self.assertAllEqual(out.mlm_targets, [[30]])

  def test_masking_error_message(self):
    error = featurization.MaskingError(MaskingStatus.MASK_WOULD_BE_TRUNCATED)
    self.assertEqual(error.status, MaskingStatus.MASK_WOULD_BE_TRUNCATED)
    self.assertIn("truncated", str(error))
    self.assertEqual(set(featurization.SKIP_REASONS),
                     {MaskingStatus.SPAN_COVERS_NO_WORDPIECE, MaskingStatus.MASK_WOULD_BE_TRUNCATED})


class EndToEndTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    vocab_path = os.path.join(self.create_tempdir().full_path, "vocab.txt")
    with open(vocab_path, "w", encoding="utf-8") as f:
      f.write("\n".join(E2E_VOCAB) + "\n")
    self.tokenizer = tokenization.Tokenizer(vocab_path)
    self.featurizer = featurization.Featurizer.from_tokenizer(self.tokenizer,
                                                              query_seq_len=12,
                                                              candidate_seq_len=8,
                                                              max_masks=3)

  def _span(self, word):
    data = SENTENCE.encode("utf-8")
    start = data.index(word.encode("utf-8"))
    return start, start + len(word.encode("utf-8"))

  def test_tokenizer_offsets_of_sentence(self):
    (row,) = self.tokenizer.tokenize_texts([SENTENCE])
    self.assertEqual(row, tokenization.TokenizedText(SENTENCE_IDS, SENTENCE_STARTS, SENTENCE_LIMITS))

  def test_mask_accented_words(self):
    spans = [self._span("Zürich"), self._span("café"), self._span("cafés"), self._span("afé")]
    self.assertEqual(spans, [(21, 28), (11, 16), (11, 17), (12, 16)])
    ids, starts, limits = self.tokenizer.tokenize_with_offsets(tf.constant([SENTENCE] * 4))
    out = self.featurizer.mask_salient_span(ids, starts, limits, [s for s, _ in spans], [l for _, l in spans])
    self.assertAllEqual(out.status, [OK, OK, OK, NO_PIECE])
    self.assertAllEqual(out.mlm_positions, [[7, 8, 0], [4, 0, 0], [4, 5, 0], [0, 0, 0]])
    self.assertAllEqual(out.mlm_targets, [[11, 12, 0], [8, 0, 0], [8, 9, 0], [0, 0, 0]])
    self.assertAllEqual(out.mlm_mask, [[1, 1, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0]])
    query = self.featurizer.query_inputs(out.token_ids)
    self.assertAllEqual(query.token_ids,
                        [[2, 5, 6, 7, 8, 9, 10, 4, 4, 13, 3, 0], [2, 5, 6, 7, 4, 9, 10, 11, 12, 13, 3, 0],
                         [2, 5, 6, 7, 4, 4, 10, 11, 12, 13, 3, 0], [2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 3, 0]])
    self.assertAllEqual(query.mask, [[1] * 11 + [0]] * 4)
    # Each predicted position holds [MASK] in the packed query; the target is what was there before.
    original = self.featurizer.query_inputs(ids).token_ids
    for b in range(3):
      for k in range(int(tf.reduce_sum(out.mlm_mask[b]))):
        position = int(out.mlm_positions[b, k])
        self.assertEqual(int(query.token_ids[b, position]), self.tokenizer.mask_id)
        self.assertEqual(int(original[b, position]), int(out.mlm_targets[b, k]))

  def test_mask_truncated_with_short_query(self):
    short = featurization.Featurizer.from_tokenizer(self.tokenizer,
                                                    query_seq_len=9,
                                                    candidate_seq_len=8,
                                                    max_masks=3)
    ids, starts, limits = self.tokenizer.tokenize_with_offsets(tf.constant([SENTENCE] * 2))
    # Q = 9 keeps 7 pieces (indices 0..6): "zu" is index 6 but "##rich" is 7.
    out = short.mask_salient_span(ids, starts, limits, [21, 18], [28, 20])
    self.assertAllEqual(out.status, [TRUNCATED, OK])

  def test_tf_data_pipeline(self):
    f, tok = self.featurizer, self.tokenizer
    sentences = [SENTENCE, "Paris is big.", "the cafés", "I love Zürich"]
    span_starts = [21, 0, 4, 7]
    span_limits = [28, 5, 10, 14]
    titles = ["Zürich", "Paris", "", "Zürich"]

    def featurize(sentence, span_start, span_limit, title):
      ids, starts, limits = tok.tokenize_with_offsets(sentence)
      masked = f.mask_salient_span(ids, starts, limits, span_start, span_limit)
      body = ids  # the sentence doubles as the candidate body
      return {
          "query": f.query_inputs(masked.token_ids),
          "candidate": f.candidate_inputs(tok.tokenize(title), body),
          "joint": f.joint_inputs(masked.token_ids, body),
          "mlm_positions": masked.mlm_positions,
          "status": masked.status,
      }

    dataset = tf.data.Dataset.from_tensor_slices((sentences, span_starts, span_limits, titles))
    dataset = dataset.batch(2, drop_remainder=True).map(featurize)
    spec = dataset.element_spec
    # The sequence dimension is static, whatever the text lengths.
    self.assertEqual(spec["query"].token_ids.shape.as_list()[1:], [12])
    self.assertEqual(spec["query"].segment_ids.shape.as_list()[1:], [12])
    self.assertEqual(spec["candidate"].token_ids.shape.as_list()[1:], [8])
    self.assertEqual(spec["joint"].token_ids.shape.as_list()[1:], [20])
    self.assertEqual(spec["mlm_positions"].shape.as_list()[1:], [3])

    batches = list(dataset)
    self.assertLen(batches, 2)
    for batch in batches:
      self.assertEqual(batch["query"].token_ids.shape, (2, 12))
      self.assertEqual(batch["joint"].token_ids.shape, (2, 20))
    first, second = batches
    self.assertAllEqual(first["query"].token_ids,
                        [[2, 5, 6, 7, 8, 9, 10, 4, 4, 13, 3, 0], [2, 4, 15, 16, 13, 3, 0, 0, 0, 0, 0, 0]])
    self.assertAllEqual(first["candidate"].token_ids,
                        [[2, 11, 12, 3, 5, 6, 7, 3], [2, 14, 3, 14, 15, 16, 13, 3]])
    self.assertAllEqual(first["candidate"].segment_ids, [[0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1, 1]])
    self.assertAllEqual(first["status"], [OK, OK])
    self.assertAllEqual(second["query"].token_ids,
                        [[2, 7, 4, 4, 3, 0, 0, 0, 0, 0, 0, 0], [2, 5, 6, 4, 4, 3, 0, 0, 0, 0, 0, 0]])
    self.assertAllEqual(second["mlm_positions"], [[2, 3, 0], [3, 4, 0]])
    # Graph and eager agree.
    eager = featurize(tf.constant(sentences[2:]), tf.constant(span_starts[2:]), tf.constant(span_limits[2:]),
                      tf.constant(titles[2:]))
    self.assertAllEqual(second["joint"].token_ids, eager["joint"].token_ids)
    self.assertAllEqual(second["joint"].token_ids,
                        [[2, 7, 4, 4, 3, 7, 8, 9, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                         [2, 5, 6, 4, 4, 3, 5, 6, 11, 12, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0]])

  def test_tf_function_with_string_signature(self):
    f, tok = self.featurizer, self.tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def query_and_null(sentences):
      empty = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int64),
                                               tf.zeros(tf.shape(sentences)[:1], tf.int64))
      return f.query_inputs(tok.tokenize(sentences)), f.candidate_inputs(empty, empty)

    query_spec, null_spec = query_and_null.get_concrete_function().structured_outputs
    self.assertEqual(query_spec.token_ids.shape.as_list(), [None, 12])
    self.assertEqual(null_spec.segment_ids.shape.as_list(), [None, 8])
    query, null = query_and_null(tf.constant([SENTENCE, ""]))
    self.assertAllEqual(query.token_ids, [[2] + SENTENCE_IDS + [3, 0], [2, 3] + [0] * 10])
    self.assertAllEqual(null.token_ids, [[2, 3, 3, 0, 0, 0, 0, 0]] * 2)
    self.assertAllEqual(null.segment_ids, [[0, 0, 1, 0, 0, 0, 0, 0]] * 2)


if __name__ == "__main__":
  tf.test.main()
