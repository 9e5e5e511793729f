"""Inverse Cloze Task examples (ORQA; reference/original_realm_orqa.md 3.6), built in-graph.

From a document with sentence offsets: pick a sentence uniformly (seeded by the example number) as the
pseudo-query; with probability mask_rate remove it from the block (no [MASK] left behind), otherwise keep
the block whole. A document with a single sentence cannot lose it, so such examples are dropped when
masked (the original's keep_example). Features:
  query  [CLS] sentence [SEP] [PAD]*                       Q = query_seq_len, segments all 0
  block  [CLS] title [SEP] block wordpieces [SEP] [PAD]*   C = block_seq_len, segments 0 then 1
  mask_query 1.0 where the sentence was removed
"""

from typing import Dict

import tensorflow as tf

from realm_tf import featurization
from realm_tf import tokenization


def _ict_example(example: Dict[str, tf.Tensor], index: tf.Tensor, tokenizer: tokenization.Tokenizer,
                 featurizer: featurization.Featurizer, block_seq_len: int, mask_rate: float, seed: int):
  ids, starts, _ = tokenizer.tokenize_with_offsets(tf.reshape(example["text"], [1]))
  ids, starts = ids.flat_values, starts.flat_values
  limits = example["sentence_byte_limit"]
  num_sentences = tf.size(limits)
  # Sentence of each wordpiece: the first sentence whose limit lies past the piece's start.
  sentence_of_piece = tf.searchsorted(limits, starts, side="right", out_type=tf.int64)
  random = tf.random.stateless_uniform([2], seed=tf.stack([tf.constant(seed, tf.int64), index]))
  query_sentence = tf.minimum(tf.cast(random[0] * tf.cast(num_sentences, tf.float32), tf.int64),
                              tf.cast(num_sentences, tf.int64) - 1)
  mask_query = random[1] < mask_rate
  in_query = tf.equal(sentence_of_piece, query_sentence)
  query_ids = tf.boolean_mask(ids, in_query)
  block_ids = tf.cond(mask_query, lambda: tf.boolean_mask(ids, tf.logical_not(in_query)), lambda: ids)
  title_ids = tokenizer.tokenize(tf.reshape(example["title"], [1]))
  query = featurizer.query_inputs(tf.RaggedTensor.from_tensor(query_ids[tf.newaxis]))
  block = featurizer.bert_format([title_ids, tf.RaggedTensor.from_tensor(block_ids[tf.newaxis])],
                                 block_seq_len)
  keep = tf.logical_and(tf.size(query_ids) > 0, tf.logical_or(tf.logical_not(mask_query), num_sentences > 1))
  features = {}
  for prefix, inputs in (("query", query), ("block", block)):
    for field, value in zip(featurization.BertInputs._fields, inputs):
      features[f"{prefix}_{field}"] = value[0]
  features["mask_query"] = tf.cast(mask_query, tf.float32)
  return features, keep


def ict_dataset(pretraining_examples: tf.data.Dataset,
                tokenizer: tokenization.Tokenizer,
                featurizer: featurization.Featurizer,
                block_seq_len: int,
                batch_size: int,
                mask_rate: float = 0.9,
                seed: int = 0,
                shuffle_buffer: int = 10000,
                skip_batches: int = 0) -> tf.data.Dataset:
  """Endless, shuffled batches of ICT features (see realm_tf.modeling.ict); deterministic per seed.

  Args:
    pretraining_examples: parsed pre-training documents (realm_tf.data.pretraining.pretraining_dataset).
    tokenizer, featurizer: the featurizer's query_seq_len packs queries.
    block_seq_len: C of the blocks.
    batch_size: global batch (drop_remainder: static shapes).
    mask_rate: probability of removing the query sentence from its block (0.9 in ORQA).
    skip_batches: batches already consumed by a resumed run.
  """
  examples = pretraining_examples.repeat().shuffle(shuffle_buffer, seed=seed,
                                                   reshuffle_each_iteration=True).enumerate()

  # No autograph: nothing here branches on tensors in Python, and converting the featurizer costs
  # seconds at each pipeline build.
  @tf.autograph.experimental.do_not_convert
  def build(index, example):
    return _ict_example(example, index, tokenizer, featurizer, block_seq_len, mask_rate, seed)

  @tf.autograph.experimental.do_not_convert
  def kept(unused_features, keep):
    return keep

  @tf.autograph.experimental.do_not_convert
  def features_only(features, unused_keep):
    return features

  examples = examples.map(build, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  examples = examples.filter(kept).map(features_only)
  return examples.batch(batch_size, drop_remainder=True).skip(skip_batches).prefetch(2)
