"""The query tower as a SavedModel module, with the input each of its three SavedModels takes.

One wrapper, so that every exported query tower embeds alike (float32 outputs, training=False):
  TEXT         embed(questions: string [B]) -> {embeddings: float32 [B, D]}; tokenizes and packs
               [CLS] question [SEP] at query_seq_len inside the graph (tensorflow_text ops; the vocab
               is an asset). bin/export_saved_model's query_embedder/.
  TOKEN_IDS    embed(input_word_ids, input_mask: int32 [B, T]) -> {embeddings}; a client's packed
               [CLS] question [SEP], unpacked and packed again as TEXT packs it (core ops only).
               query_embedder_token_ids/.
  BERT_INPUTS  embed(token_ids, mask, segment_ids: int32 [B, Q]) -> {embeddings}; BERT inputs as the
               REALM input pipeline featurizes masked queries, used as they are (core ops only). The
               query_embedder/ of a published index (realm_tf.retrieval.published_index), which the
               trainer embeds queries with.

It lives in modeling, below retrieval and export, because both write it: a published index carries its
query tower, and bin/export_saved_model exports the other two forms.
"""

from typing import Optional

import tensorflow as tf

from realm_tf import featurization
from realm_tf import tokenization
from realm_tf.modeling import bert_inputs
from realm_tf.modeling import untracked

TEXT = "text"
TOKEN_IDS = "token_ids"
BERT_INPUTS = "bert_inputs"
INPUTS = (TEXT, TOKEN_IDS, BERT_INPUTS)


class QueryEmbedderModule(tf.Module):
  """The query tower behind one tf.function `embed` whose inputs are `inputs` (see the module docstring).

  Args:
    query_embedder: a RetrieverEmbedder (Keras; any callable taking (token_ids, mask, segment_ids)) with
      restored weights.
    inputs: TEXT, TOKEN_IDS or BERT_INPUTS.
    featurizer: packs [CLS] question [SEP] to the run's query_seq_len (TEXT and TOKEN_IDS).
    tokenizer: the run's Tokenizer (TEXT only; its vocab is saved as an asset). Not kept otherwise, so
      that the other forms hold no tensorflow_text op.
  """

  def __init__(self,
               query_embedder,
               inputs: str = TEXT,
               featurizer: Optional[featurization.Featurizer] = None,
               tokenizer: Optional[tokenization.Tokenizer] = None):
    super().__init__(name="query_embedder_module")
    if inputs not in INPUTS:
      raise ValueError(f"inputs={inputs!r}: expected one of {INPUTS}")
    if inputs != BERT_INPUTS and featurizer is None:
      raise ValueError(f"inputs={inputs!r} packs questions: pass the run's featurizer")
    if inputs == TEXT and tokenizer is None:
      raise ValueError("inputs='text' tokenizes inside the graph: pass the run's tokenizer")
    self.query_embedder = untracked.Untracked(query_embedder)
    self.query_embedder_variables = untracked.variables_of(query_embedder)
    self.tokenizer = tokenizer if inputs == TEXT else None
    self._featurizer = featurizer
    if inputs == TEXT:
      self.embed = tf.function(self._embed_text,
                               autograph=False,
                               input_signature=[tf.TensorSpec([None], tf.string, name="questions")])
    elif inputs == TOKEN_IDS:
      self.embed = tf.function(
          self._embed_token_ids,
          autograph=False,
          input_signature=[bert_inputs.ids_spec("input_word_ids"),
                           bert_inputs.ids_spec("input_mask")])
    else:
      self.embed = tf.function(self._embed_bert_inputs,
                               autograph=False,
                               input_signature=[tf.TensorSpec([None, None], tf.int32)] * 3)

  def _embeddings(self, inputs):
    return {"embeddings": tf.cast(self.query_embedder(tuple(inputs), training=False), tf.float32)}

  def _embed_text(self, questions):
    return self._embeddings(self._featurizer.query_inputs(self.tokenizer.tokenize(questions)))

  def _embed_token_ids(self, input_word_ids, input_mask):
    question, _ = bert_inputs.unpack_segments(input_word_ids, input_mask)
    return self._embeddings(self._featurizer.query_inputs(question))

  def _embed_bert_inputs(self, token_ids, mask, segment_ids):
    return self._embeddings((token_ids, mask, segment_ids))
