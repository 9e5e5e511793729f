"""Tests for realm_tf.retrieval.text_embedder with the sentence-transformers embedder over a tiny random
BERT: the vector of a text must not depend on its batch, its padding or its position in the input, and
must equal the normalised mean of the encoder's outputs over [CLS] text [SEP] (sentence-transformers'
mean pooling)."""

import numpy as np
import tensorflow as tf

from realm_tf import tokenization
from realm_tf.modeling import bert
from realm_tf.modeling import embedder
from realm_tf.retrieval import text_embedder
from realm_tf.testing import tiny_inputs

_TEXTS = [
    "a short one", "the second text is quite a lot longer than the first", "mid length text", "x",
    "another text of some length for a third bucket"
]


class TextEmbedderTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    tf.keras.utils.set_random_seed(0)
    self.tokenizer = tokenization.Tokenizer(tiny_inputs.write_vocab(self.create_tempdir().full_path))
    self.embedder = embedder.sentence_transformers_embedder(bert.tiny_config(self.tokenizer.vocab_size))
    self.encoder = self.embedder.encoder

  def _embedder(self, **kwargs):
    options = dict(max_seq_length=16, batch_size=2, length_bucket=4, jit_compile=False)
    options.update(kwargs)
    return text_embedder.TextEmbedder(self.embedder, self.tokenizer, **options)

  def _reference(self, text, max_seq_length=16):
    """Normalised mean of the encoder's outputs over the unpadded [CLS] text [SEP]."""
    pieces = self.tokenizer.tokenize(tf.constant([text]))[0].numpy().tolist()[:max_seq_length - 2]
    ids = np.array([[self.tokenizer.cls_id] + pieces + [self.tokenizer.sep_id]], np.int32)
    outputs = self.encoder(bert.encoder_inputs(ids, np.ones_like(ids), np.zeros_like(ids)),
                           training=False)["sequence_output"].numpy()[0]
    mean = outputs.mean(axis=0)
    return mean / np.linalg.norm(mean)

  def test_matches_unpadded_reference(self):
    vectors = self._embedder().embed(_TEXTS)
    self.assertEqual(vectors.shape, (len(_TEXTS), 64))
    self.assertEqual(vectors.dtype, np.float32)
    self.assertAllClose(np.linalg.norm(vectors, axis=1), np.ones(len(_TEXTS)), atol=1e-5)
    for text, vector in zip(_TEXTS, vectors):
      self.assertAllClose(vector, self._reference(text), atol=1e-5, msg=text)

  def test_independent_of_batch_and_order(self):
    together = self._embedder().embed(_TEXTS)
    alone = np.stack([self._embedder(batch_size=1).embed([t])[0] for t in _TEXTS])
    self.assertAllClose(together, alone, atol=1e-5)
    reversed_order = self._embedder(batch_size=4).embed(_TEXTS[::-1])
    self.assertAllClose(together, reversed_order[::-1], atol=1e-5)

  def test_truncation(self):
    long_text = " ".join(["word"] * 40)
    vector = self._embedder(max_seq_length=8).embed([long_text])[0]
    self.assertAllClose(vector, self._reference(long_text, max_seq_length=8), atol=1e-5)
    self.assertNotAllClose(vector, self._reference(long_text, max_seq_length=16), atol=1e-5)

  def test_jit_compile_agrees(self):
    self.assertAllClose(self._embedder(jit_compile=True).embed(_TEXTS),
                        self._embedder().embed(_TEXTS),
                        atol=1e-4)

  def test_pad(self):
    ids, mask = self._embedder(max_seq_length=16).pad([np.array([101, 7, 102]), np.array([101, 102])])
    self.assertAllEqual(ids, [[101, 7, 102, 0], [101, 102, 0, 0]])
    self.assertAllEqual(mask, [[1, 1, 1, 0], [1, 1, 0, 0]])
    ids, _ = self._embedder(max_seq_length=6).pad([np.arange(6)], batch_size=3)
    self.assertEqual(ids.shape, (3, 6))  # rounded up to 8, capped at max_seq_length; 2 empty rows

  def test_empty_and_errors(self):
    self.assertEqual(self._embedder().embed([]).shape, (0, 64))
    with self.assertRaisesRegex(TypeError, r"texts\[1\] is bytes"):
      self._embedder().embed(["ok", b"bytes"])
    with self.assertRaisesRegex(ValueError, "max_seq_length must be >= 3"):
      self._embedder(max_seq_length=2)
    with self.assertRaisesRegex(ValueError, "batch_size and length_bucket must be >= 1"):
      self._embedder(batch_size=0)


if __name__ == "__main__":
  tf.test.main()
