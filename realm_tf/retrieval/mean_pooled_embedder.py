"""Sentence embeddings as sentence-transformers computes them: BERT, mean over real tokens, L2-normalised.

This is how all-MiniLM-L6-v2 (and most sentence-transformers models) embed a text: [CLS] text [SEP]
truncated to max_seq_length wordpieces, the encoder's last layer averaged over the non-padding positions
([CLS] and [SEP] included, as sentence-transformers' attention mask includes them), then divided by its
L2 norm so that inner product is cosine similarity. It serves the zero-shot dense baseline of the
SQuAD-open benchmark with a converted Hugging Face encoder (bert_conversion.load_hf_bert_directory).

Speed on CPU: texts are sorted by length and batched with padding rounded up to a multiple of
length_bucket, so a batch of short questions is not padded to 256; a partial batch is padded with empty
rows to batch_size, so that XLA (jit_compile) compiles one program per bucket length and no more.
"""

import time
from typing import Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from realm_tf import tokenization
from realm_tf.modeling import bert
from realm_tf.modeling import embedder

_TOKENIZE_CHUNK = 1024


class MeanPooledEmbedder:
  """Embeds texts with a BERT encoder and mean pooling.

  Args:
    encoder: a BertEncoderV2 (its "sequence_output" is pooled).
    tokenizer: the encoder's WordPiece tokenizer.
    max_seq_length: wordpieces per text including [CLS] and [SEP] (all-MiniLM-L6-v2 uses 256).
    batch_size: texts per forward pass.
    length_bucket: padded lengths are multiples of this (capped at max_seq_length).
    jit_compile: compile the forward pass with XLA (about 1.3x faster on CPU for MiniLM).
  """

  def __init__(self, encoder, tokenizer: tokenization.Tokenizer, max_seq_length: int = 256,
               batch_size: int = 64, length_bucket: int = 32, jit_compile: bool = True):
    if max_seq_length < 3:
      raise ValueError(f"MeanPooledEmbedder: max_seq_length must be >= 3 ([CLS] x [SEP]), got "
                       f"{max_seq_length}")
    if batch_size < 1 or length_bucket < 1:
      raise ValueError(f"MeanPooledEmbedder: batch_size and length_bucket must be >= 1, got "
                       f"{batch_size} and {length_bucket}")
    self._encoder = encoder
    self._tokenizer = tokenizer
    self.max_seq_length = max_seq_length
    self.batch_size = batch_size
    self.length_bucket = length_bucket
    # One trace for every shape; XLA still compiles one program per (batch, bucket length).
    spec = tf.TensorSpec([None, None], tf.int32)
    self._forward = tf.function(self._pooled, jit_compile=jit_compile, input_signature=[spec, spec])

  def _pooled(self, token_ids, mask):
    outputs = self._encoder(bert.encoder_inputs(token_ids, mask, tf.zeros_like(token_ids)),
                            training=False)
    # The empty rows that pad a partial batch come out as zeros (and are dropped by embed).
    return tf.math.l2_normalize(embedder.mean_pool(outputs["sequence_output"], mask), axis=-1)

  def token_ids(self, texts: Sequence[str]) -> List[np.ndarray]:
    """[CLS] wordpieces [SEP] of each text, cut to max_seq_length: what embed() feeds the encoder."""
    keep = self.max_seq_length - 2
    ids = []
    for start in range(0, len(texts), _TOKENIZE_CHUNK):
      chunk = [t.encode("utf-8") for t in texts[start:start + _TOKENIZE_CHUNK]]
      for row in self._tokenizer.tokenize(tf.constant(chunk, tf.string)).to_list():
        ids.append(np.array([self._tokenizer.cls_id] + row[:keep] + [self._tokenizer.sep_id], np.int32))
    return ids

  def embed(self, texts: Sequence[str], log: Optional[Callable[[str], None]] = None,
            log_every_s: float = 60.0) -> np.ndarray:
    """float32 [len(texts), hidden_size], unit-norm rows, in the order of texts."""
    for i, text in enumerate(texts):
      if not isinstance(text, str):
        raise TypeError(f"MeanPooledEmbedder.embed: texts[{i}] is {type(text).__name__}, expected str")
    if not texts:
      return np.zeros([0, self._encoder.get_config()["hidden_size"]], np.float32)
    ids = self.token_ids(texts)
    order = np.argsort([len(row) for row in ids], kind="stable")
    output = None
    start_time = last_log = time.perf_counter()
    for start in range(0, len(order), self.batch_size):
      rows = order[start:start + self.batch_size]
      longest = max(len(ids[r]) for r in rows)
      length = min(self.max_seq_length, -(-longest // self.length_bucket) * self.length_bucket)
      token_ids = np.zeros([self.batch_size, length], np.int32)
      mask = np.zeros([self.batch_size, length], np.int32)
      for slot, r in enumerate(rows):
        token_ids[slot, :len(ids[r])] = ids[r]
        mask[slot, :len(ids[r])] = 1
      pooled = self._forward(tf.constant(token_ids), tf.constant(mask)).numpy()
      if output is None:
        output = np.zeros([len(texts), pooled.shape[1]], np.float32)
      output[rows] = pooled[:len(rows)]
      now = time.perf_counter()
      if log is not None and now - last_log >= log_every_s:
        done = start + len(rows)
        log(f"embedded {done}/{len(texts)} texts ({done / (now - start_time):.1f}/s)")
        last_log = now
    return output
