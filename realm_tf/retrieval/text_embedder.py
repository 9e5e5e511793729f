"""Embeds a list of texts with a RetrieverEmbedder on the host: tokenized, sorted by length, batched with
little padding, returned in the texts' order.

With the sentence-transformers embedder (RetrieverEmbedder with pooling="mean", projection_size=None,
cosine_score_scale=1 over a converted all-MiniLM-L6-v2 encoder) this computes all-MiniLM-L6-v2's
embeddings as sentence-transformers does: [CLS] text [SEP] truncated to max_seq_length wordpieces, the
last layer averaged over the non-padding positions ([CLS] and [SEP] included, as sentence-transformers'
attention mask includes them), divided by its L2 norm. It serves the zero-shot dense baseline of the SQuAD-open
benchmarks and their evaluation of a fine-tuned query tower.

Speed on CPU: texts are sorted by length and batched with padding rounded up to a multiple of
length_bucket, so a batch of short questions is not padded to 256; a partial batch is padded with empty
rows to batch_size, so that XLA (jit_compile) compiles one program per bucket length and no more.
"""

import time
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import tokenization
from realm_tf.modeling import embedder as embedder_lib

_TOKENIZE_CHUNK = 1024


class TextEmbedder:
  """Embeds texts with an embedder model.

  Args:
    embedder: the RetrieverEmbedder (called with training=False; segment ids 0).
    tokenizer: its encoder's WordPiece tokenizer.
    max_seq_length: wordpieces per text including [CLS] and [SEP] (all-MiniLM-L6-v2 uses 256).
    batch_size: texts per forward pass.
    length_bucket: padded lengths are multiples of this (capped at max_seq_length).
    jit_compile: compile the forward pass with XLA (about 1.3x faster on CPU for MiniLM).
  """

  def __init__(self,
               embedder: embedder_lib.RetrieverEmbedder,
               tokenizer: tokenization.Tokenizer,
               max_seq_length: int = 256,
               batch_size: int = 64,
               length_bucket: int = 32,
               jit_compile: bool = True):
    if max_seq_length < 3:
      raise ValueError(f"TextEmbedder: max_seq_length must be >= 3 ([CLS] x [SEP]), got "
                       f"{max_seq_length}")
    if batch_size < 1 or length_bucket < 1:
      raise ValueError(f"TextEmbedder: batch_size and length_bucket must be >= 1, got "
                       f"{batch_size} and {length_bucket}")
    self.embedder = embedder
    self._tokenizer = tokenizer
    self.max_seq_length = max_seq_length
    self.batch_size = batch_size
    self.length_bucket = length_bucket
    # One trace for every shape; XLA still compiles one program per (batch, bucket length).
    spec = tf.TensorSpec([None, None], tf.int32)
    self._forward = tf.function(self._embed_batch,
                                jit_compile=jit_compile,
                                input_signature=[spec, spec],
                                autograph=False)

  def _embed_batch(self, token_ids, mask):
    # The empty rows that pad a partial batch come out as zeros (and are dropped by embed).
    return self.embedder((token_ids, mask, tf.zeros_like(token_ids)), training=False)

  def token_ids(self, texts: Sequence[str]) -> List[np.ndarray]:
    """[CLS] wordpieces [SEP] of each text, cut to max_seq_length: what embed() feeds the encoder."""
    keep = self.max_seq_length - 2
    ids = []
    for start in range(0, len(texts), _TOKENIZE_CHUNK):
      chunk = [t.encode("utf-8") for t in texts[start:start + _TOKENIZE_CHUNK]]
      for row in self._tokenizer.tokenize(tf.constant(chunk, tf.string)).to_list():
        ids.append(np.array([self._tokenizer.cls_id] + row[:keep] + [self._tokenizer.sep_id], np.int32))
    return ids

  def pad(self,
          rows: Sequence[np.ndarray],
          batch_size: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """(token ids, mask), int32 [batch_size or len(rows), L]: rows (from token_ids) left-aligned, L the
    longest rounded up to a multiple of length_bucket and capped at max_seq_length; extra rows empty."""
    longest = max(len(row) for row in rows)
    length = min(self.max_seq_length, -(-longest // self.length_bucket) * self.length_bucket)
    token_ids = np.zeros([batch_size or len(rows), length], np.int32)
    mask = np.zeros([batch_size or len(rows), length], np.int32)
    for slot, row in enumerate(rows):
      token_ids[slot, :len(row)] = row
      mask[slot, :len(row)] = 1
    return token_ids, mask

  def embed(self,
            texts: Sequence[str],
            log: Optional[Callable[[str], None]] = None,
            log_every_s: float = 60.0) -> np.ndarray:
    """float32 [len(texts), D], in the order of texts."""
    for i, text in enumerate(texts):
      if not isinstance(text, str):
        raise TypeError(f"TextEmbedder.embed: texts[{i}] is {type(text).__name__}, expected str")
    output = np.zeros([len(texts), self.embedder.output_size], np.float32)
    if not texts:
      return output
    ids = self.token_ids(texts)
    order = np.argsort([len(row) for row in ids], kind="stable")
    start_time = last_log = time.perf_counter()
    for start in range(0, len(order), self.batch_size):
      rows = order[start:start + self.batch_size]
      token_ids, mask = self.pad([ids[r] for r in rows], self.batch_size)
      output[rows] = self._forward(tf.constant(token_ids), tf.constant(mask)).numpy()[:len(rows)]
      now = time.perf_counter()
      if log is not None and now - last_log >= log_every_s:
        done = start + len(rows)
        log(f"embedded {done}/{len(texts)} texts ({done / (now - start_time):.1f}/s)")
        last_log = now
    return output
