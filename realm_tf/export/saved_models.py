"""SavedModels of a trained run: raw-text signatures, and token-id twins that need only core TensorFlow.

Raw text (tokenization runs inside: realm_tf.tokenization.Tokenizer, tensorflow_text ops; the vocab file
becomes an asset):

  query_embedder/     serving_default(questions: string [B]) -> {embeddings: float32 [B, D]}
                      the fine-tuned query tower; [CLS] question [SEP] at the run's query_seq_len
  document_embedder/  serving_default(titles: string [B], bodies: string [B]) -> {embeddings: [B, D]}
                      the (frozen) document tower that embedded the index: new documents embedded with
                      it are comparable with the index's
  open_qa/            serving_default(questions: string [B]) -> {answers: string [B], scores: float32 [B],
                      block_ids: int32 [B, K] (corpus rows, best first), doc_ids, block_titles,
                      block_texts: string [B, K], retriever_scores: float32 [B, K],
                      answer_block_ids: int32 [B] (the answer's corpus row, one of block_ids),
                      answer_byte_starts / answer_byte_limits: int32 [B] (its byte span in that
                      block's text; -1 for no answer)}
                      K = the reader beam. It carries the whole index and the block texts: brute force
                      over the embedded blocks (exact; fine for small corpora), or a ScaNN searcher
                      (index="scann", ScaNN's TF ops, serialized with the model) whose candidates are
                      re-ranked by their exact inner product, as ORQA re-scored ScaNN's ids.

These need tensorflow_text's ops registered in the process that loads them (`import tensorflow_text`;
TF Serving's model server links TF Text's ops), and a ScaNN export ScaNN's (`import scann`; TF Serving
only with a model server built with them). Stock `saved_model_cli` imports neither: a graph holding one
unregistered op anywhere does not load at all, whichever signature is asked for.

Token ids (core TensorFlow ops only: stock saved_model_cli, any TF Serving build), one SavedModel each,
with signatures serving_default and serving_token_ids (the same function). The client tokenizes with a
BERT WordPiece tokenizer of the run's vocab (a copy is in assets.extra/vocab.txt) and sends packed BERT
inputs, int32 [B, T] of any T, [PAD] = 0:

  query_embedder_token_ids/     (input_word_ids, input_mask): [CLS] question [SEP] -> {embeddings}
  document_embedder_token_ids/  (input_word_ids, input_mask, input_type_ids):
                                [CLS] title [SEP] body [SEP], type ids 0 then 1 -> {embeddings}
  open_qa_token_ids/            (input_word_ids, input_mask): [CLS] question [SEP] -> the raw model's
                                outputs plus answer_token_ids int32 [B, max_span_width] (0-padded);
                                always exact brute-force search.

The pieces are taken back out of the packing ([CLS]/[SEP] dropped, segments by input_type_ids) and packed
again exactly as the raw-text signatures pack them (truncated to the run's sequence lengths), so a client
that does not truncate gets the raw-text model's outputs. open_qa_token_ids slices answers with the byte
offsets of every block wordpiece, computed when exporting (two int32 [N, C] arrays more than open_qa).

`realm_tf.export.loader.load_saved_model` registers what a model needs, reading which from
assets.extra/realm_tf_export.json.
Exports are written into a temporary sibling directory and renamed into place, so a reader sees no model
or a complete one.
"""

import os
import shutil
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np

import tensorflow as tf

from realm_tf import featurization
from realm_tf import io_utils
from realm_tf import tokenization
from realm_tf.checkpoints import released
from realm_tf.checkpoints import training_state
from realm_tf.conversion import released_conversion
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import corpus_table
from realm_tf.data import orqa_features
from realm_tf.export import loader
from realm_tf.modeling import bert_inputs
from realm_tf.modeling import query_embedder_module as query_embedder_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.modeling import untracked
from realm_tf.retrieval import fusion
from realm_tf.retrieval import hybrid
from realm_tf.retrieval import scann_index
from realm_tf.retrieval import sparse_in_graph
from realm_tf.runs import orqa_model

QUERY_EMBEDDER = "query_embedder"
DOCUMENT_EMBEDDER = "document_embedder"
INDEX_CHOICES = ("brute_force", "scann")
# What open_qa retrieves by (realm_tf/retrieval/hybrid.py's names; the gold retriever needs the question's
# own document, which a served question does not name).
RETRIEVER_CHOICES = (hybrid.DENSE, hybrid.BM25, hybrid.HYBRID)
TOKEN_IDS_SIGNATURE = "serving_token_ids"
VOCAB_COPY = os.path.join("assets.extra", "vocab.txt")


class DocumentEmbedderModule(tf.Module):
  """(titles, bodies) -> document embeddings, [CLS] title [SEP] body [SEP] at candidate_seq_len."""

  def __init__(self, tokenizer: tokenization.Tokenizer, featurizer: featurization.Featurizer, doc_embedder):
    super().__init__(name="document_embedder_module")
    self.tokenizer = tokenizer
    self.doc_embedder = untracked.Untracked(doc_embedder)
    self.doc_embedder_variables = untracked.variables_of(doc_embedder)
    self._featurizer = featurizer

  @tf.function(input_signature=[
      tf.TensorSpec([None], tf.string, name="titles"),
      tf.TensorSpec([None], tf.string, name="bodies")
  ],
               autograph=False)
  def embed(self, titles, bodies):
    # One tokenizer call for both fields: each traced call adds thousands of ops to the graph.
    count = tf.shape(titles, out_type=tf.int64)[0]
    pieces = self.tokenizer.tokenize(tf.concat([titles, bodies], 0))
    inputs = self._featurizer.candidate_inputs(pieces[:count], pieces[count:])
    return {"embeddings": tf.cast(self.doc_embedder(tuple(inputs), training=False), tf.float32)}


class DocumentEmbedderTokenIdsModule(tf.Module):
  """Packed [CLS] title [SEP] body [SEP] ids -> document embeddings; core ops only."""

  def __init__(self, featurizer: featurization.Featurizer, doc_embedder):
    super().__init__(name="document_embedder_token_ids_module")
    self.doc_embedder = untracked.Untracked(doc_embedder)
    self.doc_embedder_variables = untracked.variables_of(doc_embedder)
    self._featurizer = featurizer

  @tf.function(input_signature=[
      bert_inputs.ids_spec("input_word_ids"),
      bert_inputs.ids_spec("input_mask"),
      bert_inputs.ids_spec("input_type_ids")
  ],
               autograph=False)
  def embed(self, input_word_ids, input_mask, input_type_ids):
    titles, bodies = bert_inputs.unpack_segments(input_word_ids, input_mask, input_type_ids)
    inputs = self._featurizer.candidate_inputs(titles, bodies)
    return {"embeddings": tf.cast(self.doc_embedder(tuple(inputs), training=False), tf.float32)}


class OpenQaModule(tf.Module):
  """Questions -> answers, with retrieval over the carried index and the span reader.

  Args:
    model: an OrqaModel with restored weights (its query tower, reader and frozen corpus are saved; its
      document tower is not needed here).
    tokenizer, featurizer: the run's.
    titles, bodies, doc_ids: the corpus, row i = block i of the index.
    index: "brute_force" or "scann".
    scann_options: realm_tf.retrieval.index.ScannOptions for index="scann" (below tree_min_docs
      documents ScaNN scores by brute force).
  """

  def __init__(self,
               model,
               tokenizer: tokenization.Tokenizer,
               featurizer: featurization.Featurizer,
               titles,
               bodies,
               doc_ids,
               index: str = "brute_force",
               scann_options: Optional[scann_index.ScannOptions] = None,
               retriever: str = hybrid.DENSE,
               sparse: Optional[sparse_in_graph.WordpieceBm25] = None,
               bm25_weight: Optional[float] = None):
    super().__init__(name="open_qa_module")
    if index not in INDEX_CHOICES:
      raise ValueError(f"index must be one of {INDEX_CHOICES}, got {index!r}")
    self.tokenizer = tokenizer
    # What `answer` reads: the query tower, the reader and (below) the frozen corpus; not the document
    # tower.
    self.model_variables = untracked.variables_of(model.retriever.query_embedder, model.reader)
    self.block_embeddings = model.corpus.embeddings
    self.block_token_ids = model.corpus.token_ids
    self.block_lengths = model.corpus.lengths
    self.block_titles = tf.Variable(list(titles), dtype=tf.string, trainable=False)
    self.block_texts = tf.Variable(list(bodies), dtype=tf.string, trainable=False)
    self.block_doc_ids = tf.Variable(list(doc_ids), dtype=tf.string, trainable=False)
    self._model = untracked.Untracked(model)
    self._featurizer = featurizer
    self.index = index
    self.scann_parameters = None
    self._candidate_fn = None
    dense_candidates = model.num_blocks
    if index == "scann":
      self._candidate_fn = self._build_scann(model, scann_options or scann_index.ScannOptions())
      dense_candidates = self.scann_parameters["num_candidates"]
    _attach_retriever(self, model, retriever, sparse, dense_candidates, bm25_weight)

  def _build_scann(self, model, options: scann_index.ScannOptions) -> Callable:
    import scann  # pylint: disable=g-import-not-at-top,import-outside-toplevel  (only for this index)
    embeddings = model.corpus.embeddings.numpy()
    params = options.resolve(embeddings.shape[0])
    num_candidates = min(embeddings.shape[0], max(params["num_candidates"], model.reader_beam))
    builder = scann.scann_ops.builder(tf.constant(embeddings), num_candidates, "dot_product")
    if params["mode"] == "tree_ah":
      builder = builder.tree(num_leaves=params["num_leaves"],
                             num_leaves_to_search=params["num_leaves_to_search"],
                             training_sample_size=params["training_sample_size"])
      threshold = params["anisotropic_quantization_threshold"]
      builder = builder.score_ah(
          params["dimensions_per_block"],
          anisotropic_quantization_threshold=(float("nan") if threshold is None else float(threshold)))
    else:
      builder = builder.score_brute_force()
    self.scann_state = builder.build().serialize_to_module()
    self.scann_parameters = dict(params, num_candidates=num_candidates)

    def candidates(query):
      # The searcher is rebuilt from the saved state's tensors on each call (ScaNN's own
      # searcher_from_module); this is measured at well under a millisecond for 200k x 64.
      searcher = scann.scann_ops.searcher_from_module(self.scann_state)
      rows, _ = searcher.search_batched(query, final_num_neighbors=num_candidates)
      return rows

    return candidates

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="questions")], autograph=False)
  def answer(self, questions):
    model = self._model.model
    features = orqa_features.question_features(self.tokenizer, self._featurizer, questions,
                                               model.orqa.reader_seq_len)
    outputs = model.predict_answers(features,
                                    training=False,
                                    candidate_fn=self._candidate_fn,
                                    block_rows=_retrieved_rows(self, model, features, self._candidate_fn))
    row = outputs["predicted_row"]
    text = tf.gather(self.block_texts, row)
    begin, end = orqa_features.answer_byte_spans(self.tokenizer, text, outputs["first_piece"],
                                                 outputs["last_piece"])
    result = _retrieved_outputs(self, outputs, orqa_features.slice_answers(text, begin, end))
    # Where the answer sits, so a client (bin/serve's page) can mark it in its passage.
    result.update(answer_block_ids=row,
                  answer_byte_starts=tf.cast(begin, tf.int32),
                  answer_byte_limits=tf.cast(end, tf.int32))
    return result


def check_retriever(retriever: str, bm25_weight: Optional[float] = None) -> None:
  """ValueError naming the flag for a retriever open_qa cannot retrieve by, or a weight it cannot use."""
  if retriever not in RETRIEVER_CHOICES:
    raise ValueError(f"--retriever={retriever}: choose one of {', '.join(RETRIEVER_CHOICES)}")
  hybrid.check_weight_of(retriever, bm25_weight)


def _attach_retriever(module: tf.Module,
                      model,
                      retriever: str,
                      sparse: Optional[sparse_in_graph.WordpieceBm25],
                      dense_candidates: int,
                      bm25_weight: Optional[float] = None) -> None:
  """Gives an open-QA module its retriever: the BM25 postings (variables) for bm25 and hybrid, the
  hybrid's fusion depth (hybrid.FUSION_DEPTH, capped at the corpus and at a ScaNN searcher's candidates)
  and its fusion (reciprocal rank fusion, or with bm25_weight the weighted score sum)."""
  check_retriever(retriever, bm25_weight)
  if retriever != hybrid.DENSE and sparse is None:
    raise ValueError(f"--retriever={retriever} needs the corpus's BM25 index (sparse_in_graph.build)")
  if sparse is not None and sparse.num_docs != model.num_blocks:
    raise ValueError(f"the BM25 index has {sparse.num_docs} documents but the model's index "
                     f"{model.num_blocks} blocks: build it from the same corpus")
  module.retrieval = retriever
  module.sparse = sparse_in_graph.InGraphBm25(sparse) if retriever != hybrid.DENSE else None
  module.fusion_depth = max(model.reader_beam, min(hybrid.FUSION_DEPTH, model.num_blocks, dense_candidates))
  module.bm25_weight = bm25_weight


def _retrieved_rows(module: tf.Module, model, features, candidate_fn=None) -> Optional[tf.Tensor]:
  """The rows the module's bm25 or hybrid retriever reads, int32 [B, reader_beam]; None for dense (the
  model then searches its index itself)."""
  if module.retrieval == hybrid.DENSE:
    return None

  def dense_rows(depth):  # and their exact scores, which the weighted fusion reads
    return model.retrieve(features, depth, training=False, candidate_fn=candidate_fn)

  # The question's wordpieces as the reader gets them: the first reader_seq_len - 3 (bm25s's analysis
  # reads a question whole; questions are far shorter).
  return sparse_in_graph.retrieve_rows(module.retrieval, module.sparse, features[orqa_features.QUESTION_IDS],
                                       features[orqa_features.QUESTION_LEN], dense_rows, model.reader_beam,
                                       module.fusion_depth, module.bm25_weight)


def _retrieved_outputs(module, outputs, answers) -> Dict[str, tf.Tensor]:
  """The open-QA signature's outputs from OrqaModel.predict_answers' (module carries the block texts)."""
  rows = outputs["block_rows"]
  return {
      "answers": answers,
      "scores": outputs["score"],
      "block_ids": rows,
      "doc_ids": tf.gather(module.block_doc_ids, rows),
      "block_titles": tf.gather(module.block_titles, rows),
      "block_texts": tf.gather(module.block_texts, rows),
      "retriever_scores": outputs["retriever_logits"]
  }


def block_piece_offsets(tokenizer: tokenization.Tokenizer,
                        blocks: corpus_table.CorpusTable,
                        max_block_len: int,
                        batch_size: int = 512,
                        log: Callable[[str], None] = print) -> Tuple[np.ndarray, np.ndarray]:
  """Byte spans [start, limit) in each block's text of its first C wordpieces: int32 [N, C] each, -1 past
  the block's wordpieces (C: the width of blocks.dense_bodies(max_block_len), the model's block ids).

  Tokenizes the bodies again with the run's tokenizer; a block whose wordpieces differ from the corpus's
  (a corpus written with another tokenizer or vocab) is reported, as its answers would be misplaced.
  """
  token_ids, lengths = blocks.dense_bodies(max_block_len)
  count, width = token_ids.shape
  starts = np.full([count, width], -1, np.int32)
  limits = np.full([count, width], -1, np.int32)
  tokenize = tf.function(tokenizer.tokenize_with_offsets, autograph=False)
  differing = []
  for begin in range(0, count, batch_size):
    end = min(begin + batch_size, count)
    ids, piece_starts, piece_limits = tokenize(tf.constant(blocks.bodies[begin:end], tf.string))
    shape = [end - begin, width]
    starts[begin:end] = piece_starts[:, :width].to_tensor(-1, shape=shape).numpy()
    limits[begin:end] = piece_limits[:, :width].to_tensor(-1, shape=shape).numpy()
    same = np.all(ids[:, :width].to_tensor(0, shape=shape).numpy() == token_ids[begin:end], 1)
    same &= np.minimum(ids.row_lengths().numpy(), width) == lengths[begin:end]
    differing.extend(begin + np.flatnonzero(~same))
  if differing:
    log(f"WARNING: {len(differing)} of {count} blocks (rows {differing[:5]}...) tokenize differently "
        "from the corpus's wordpieces (a corpus written with another tokenizer or vocab): their answers "
        "will be misplaced; regenerate the corpus with bin/generate_retrieval_corpus and retrain")
  return starts, limits


class OpenQaTokenIdsModule(tf.Module):
  """Packed [CLS] question [SEP] ids -> answers and retrieved blocks; core ops only (exact brute-force
  search; answers sliced with block_piece_offsets). See the module docstring for the signature.

  Args:
    model: an OrqaModel with restored weights.
    featurizer: the run's.
    blocks: the corpus (realm_tf.data.corpus_table.CorpusTable), row i = block i of the index.
    piece_starts, piece_limits: block_piece_offsets(...) of these blocks.
  """

  def __init__(self,
               model,
               featurizer: featurization.Featurizer,
               blocks: corpus_table.CorpusTable,
               piece_starts: np.ndarray,
               piece_limits: np.ndarray,
               retriever: str = hybrid.DENSE,
               sparse: Optional[sparse_in_graph.WordpieceBm25] = None,
               bm25_weight: Optional[float] = None):
    super().__init__(name="open_qa_token_ids_module")
    # What `answer` reads: the query tower, the reader and (below) the frozen corpus; not the document
    # tower.
    self.model_variables = untracked.variables_of(model.retriever.query_embedder, model.reader)
    self.block_embeddings = model.corpus.embeddings
    self.block_token_ids = model.corpus.token_ids
    self.block_lengths = model.corpus.lengths
    self.block_titles = tf.Variable(list(blocks.titles), dtype=tf.string, trainable=False)
    self.block_texts = tf.Variable(list(blocks.bodies), dtype=tf.string, trainable=False)
    self.block_doc_ids = tf.Variable(list(blocks.doc_ids), dtype=tf.string, trainable=False)
    self.block_piece_starts = tf.Variable(piece_starts, dtype=tf.int32, trainable=False)
    self.block_piece_limits = tf.Variable(piece_limits, dtype=tf.int32, trainable=False)
    self._model = untracked.Untracked(model)
    self._featurizer = featurizer
    _attach_retriever(self, model, retriever, sparse, model.num_blocks, bm25_weight)

  @tf.function(input_signature=[bert_inputs.ids_spec("input_word_ids"),
                                bert_inputs.ids_spec("input_mask")],
               autograph=False)
  def answer(self, input_word_ids, input_mask):
    model = self._model.model
    question, _ = bert_inputs.unpack_segments(input_word_ids, input_mask)
    # pylint: disable-next=protected-access  (the raw-text path's packing, minus its tokenizer call)
    features = orqa_features._question_features(self._featurizer, question, model.orqa.reader_seq_len)
    outputs = model.predict_answers(features,
                                    training=False,
                                    block_rows=_retrieved_rows(self, model, features))
    row = outputs["predicted_row"]
    first, last = outputs["first_piece"], outputs["last_piece"]
    width = self.block_piece_starts.shape[1]
    valid = tf.logical_and(tf.logical_and(first >= 0, last >= first), last < width)
    first_index = tf.stack([row, tf.where(valid, first, 0)], 1)
    last_index = tf.stack([row, tf.where(valid, last, 0)], 1)
    begin = tf.gather_nd(self.block_piece_starts, first_index)
    end = tf.gather_nd(self.block_piece_limits, last_index)
    valid = tf.logical_and(valid, tf.logical_and(begin >= 0, end >= begin))
    begin, end = tf.where(valid, begin, -1), tf.where(valid, end, -1)
    text = tf.gather(self.block_texts, row)
    answers = tf.where(valid,
                       tf.strings.substr(text, tf.maximum(begin, 0), tf.maximum(end - begin, 0), unit="BYTE"),
                       "")
    span = tf.range(model.orqa.max_span_width, dtype=tf.int32)[tf.newaxis, :]
    in_span = tf.logical_and(valid[:, tf.newaxis], span <= (last - first)[:, tf.newaxis])
    piece = tf.clip_by_value(first[:, tf.newaxis] + span, 0, self.block_token_ids.shape[1] - 1)
    answer_ids = tf.where(in_span, tf.gather(tf.gather(self.block_token_ids, row), piece, batch_dims=1), 0)
    result = _retrieved_outputs(self, outputs, answers)
    result.update(answer_block_ids=row,
                  answer_byte_starts=begin,
                  answer_byte_limits=end,
                  answer_token_ids=answer_ids)
    return result


def _save(module: tf.Module,
          signature,
          path: str,
          info: Dict,
          signature_keys: Sequence[str] = ("serving_default",),
          vocab_path: Optional[str] = None) -> str:
  """Saves module with its serving signature (under each of signature_keys) into path atomically
  (temporary sibling, then rename); vocab_path, if given, is copied to assets.extra/vocab.txt."""
  path = os.path.abspath(path)
  if os.path.exists(path):
    raise FileExistsError(f"{path} already exists; export into a new directory (or delete it first)")
  parent = os.path.dirname(path)
  os.makedirs(parent, exist_ok=True)
  tmp = io_utils.temporary_path(path)
  try:
    tf.saved_model.save(module, tmp, signatures={key: signature for key in signature_keys})
    os.makedirs(os.path.join(tmp, os.path.dirname(loader.EXPORT_INFO)), exist_ok=True)
    io_utils.write_json_atomic(os.path.join(tmp, loader.EXPORT_INFO), info)
    if vocab_path:
      tf.io.gfile.copy(vocab_path, os.path.join(tmp, VOCAB_COPY))
    for directory, _, files in os.walk(tmp):
      for name in files:
        io_utils.fsync_path(os.path.join(directory, name))
    os.rename(tmp, path)
    io_utils.fsync_path(parent)
  finally:
    if os.path.exists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)
  return path


def _token_ids_info(info: Optional[Dict], kind: str, tokenizer: tokenization.Tokenizer, inputs: str) -> Dict:
  return dict(info or {},
              kind=kind + loader.TOKEN_IDS_SUFFIX,
              inputs=inputs,
              vocab=VOCAB_COPY,
              vocab_size=tokenizer.vocab_size,
              vocab_sha256=corpus_lib.vocab_sha256(tokenizer.vocab_path),
              do_lower_case=tokenizer.do_lower_case,
              pad_id=tokenizer.pad_id,
              cls_id=tokenizer.cls_id,
              sep_id=tokenizer.sep_id,
              signatures=["serving_default", TOKEN_IDS_SIGNATURE])


_TOKEN_ID_KEYS = ("serving_default", TOKEN_IDS_SIGNATURE)
_QUESTION_INPUTS = ("input_word_ids, input_mask int32 [B, T]: [CLS] question [SEP] [PAD]*, mask 1 on "
                    "the [CLS]..[SEP] positions")


def export_query_embedder(config: realm_config_lib.RealmConfig,
                          query_embedder,
                          path: str,
                          info: Optional[Dict] = None) -> str:
  tokenizer = config.tokenizer()
  module = query_embedder_lib.QueryEmbedderModule(query_embedder, query_embedder_lib.TEXT,
                                                  config.featurizer(tokenizer), tokenizer)
  return _save(
      module, module.embed, path,
      dict(info or {}, kind=QUERY_EMBEDDER, query_seq_len=config.query_seq_len, dim=config.embedding_dim))


def export_query_embedder_token_ids(config: realm_config_lib.RealmConfig,
                                    query_embedder,
                                    path: str,
                                    info: Optional[Dict] = None) -> str:
  """The core-ops twin of export_query_embedder (signatures serving_default and serving_token_ids)."""
  tokenizer = config.tokenizer()
  module = query_embedder_lib.QueryEmbedderModule(query_embedder, query_embedder_lib.TOKEN_IDS,
                                                  config.featurizer(tokenizer))
  return _save(
      module, module.embed, path,
      dict(_token_ids_info(info, QUERY_EMBEDDER, tokenizer, _QUESTION_INPUTS),
           query_seq_len=config.query_seq_len,
           dim=config.embedding_dim), _TOKEN_ID_KEYS, tokenizer.vocab_path)


def export_document_embedder(config: realm_config_lib.RealmConfig,
                             doc_embedder,
                             path: str,
                             info: Optional[Dict] = None) -> str:
  tokenizer = config.tokenizer()
  module = DocumentEmbedderModule(tokenizer, config.featurizer(tokenizer), doc_embedder)
  return _save(
      module, module.embed, path,
      dict(info or {},
           kind=DOCUMENT_EMBEDDER,
           candidate_seq_len=config.candidate_seq_len,
           dim=config.embedding_dim))


def export_document_embedder_token_ids(config: realm_config_lib.RealmConfig,
                                       doc_embedder,
                                       path: str,
                                       info: Optional[Dict] = None) -> str:
  """The core-ops twin of export_document_embedder."""
  tokenizer = config.tokenizer()
  module = DocumentEmbedderTokenIdsModule(config.featurizer(tokenizer), doc_embedder)
  return _save(
      module, module.embed, path,
      dict(_token_ids_info(
          info, DOCUMENT_EMBEDDER, tokenizer,
          "input_word_ids, input_mask, input_type_ids int32 [B, T]: [CLS] title [SEP] "
          "body [SEP] [PAD]*, type ids 0 on [CLS] title [SEP], 1 on body [SEP]"),
           candidate_seq_len=config.candidate_seq_len,
           dim=config.embedding_dim), _TOKEN_ID_KEYS, tokenizer.vocab_path)


def build_sparse(trained, retriever: str) -> Optional[sparse_in_graph.WordpieceBm25]:
  """The BM25 index an open-QA export of retriever carries (None for dense): the wordpieces of the run's
  frozen corpus (trained.blocks, title and body whole), so it follows bin/update_index's updates."""
  check_retriever(retriever)
  if retriever == hybrid.DENSE:
    return None
  return sparse_in_graph.build(trained.tokenizer, trained.blocks.titles, trained.blocks.bodies)


def _retriever_info(module: tf.Module) -> Dict:
  """What the export's info records of its retriever (loader.retriever_of reads "retriever")."""
  info = {"retriever": module.retrieval}
  if module.sparse is not None:
    info["bm25"] = module.sparse.parameters
  if module.retrieval == hybrid.HYBRID and module.bm25_weight is None:
    info["fusion"] = {
        "method": "reciprocal rank fusion",
        "k": fusion.DEFAULT_K,
        "depth_per_ranking": module.fusion_depth
    }
  elif module.retrieval == hybrid.HYBRID:
    info["fusion"] = {
        "method": loader.WEIGHTED_FUSION,
        "bm25_weight": module.bm25_weight,
        "depth_per_ranking": module.fusion_depth
    }
  return info


def export_open_qa(trained,
                   path: str,
                   index: str = "brute_force",
                   scann_options: Optional[scann_index.ScannOptions] = None,
                   info: Optional[Dict] = None,
                   retriever: str = hybrid.DENSE,
                   sparse: Optional[sparse_in_graph.WordpieceBm25] = None,
                   bm25_weight: Optional[float] = None) -> str:
  """Exports a realm_tf.runs.orqa_model.TrainedOrqa (load_trained) as the open-QA SavedModel retrieving
  by retriever (RETRIEVER_CHOICES; sparse: build_sparse(trained, retriever), built here when not given;
  bm25_weight: the hybrid's weighted score sum instead of reciprocal rank fusion)."""
  blocks = trained.blocks
  if sparse is None:
    sparse = build_sparse(trained, retriever)
  module = OpenQaModule(trained.model, trained.tokenizer, trained.featurizer, blocks.titles, blocks.bodies,
                        blocks.doc_ids, index, scann_options, retriever, sparse, bm25_weight)
  return _save(
      module, module.answer, path,
      dict(info or {},
           **_retriever_info(module),
           kind=loader.OPEN_QA,
           index=index,
           scann_parameters=module.scann_parameters,
           num_blocks=trained.model.num_blocks,
           reader_beam=trained.model.reader_beam,
           checkpoint=trained.checkpoint))


def export_open_qa_token_ids(trained,
                             path: str,
                             info: Optional[Dict] = None,
                             log: Callable[[str], None] = print,
                             retriever: str = hybrid.DENSE,
                             sparse: Optional[sparse_in_graph.WordpieceBm25] = None,
                             bm25_weight: Optional[float] = None) -> str:
  """The core-ops twin of export_open_qa: exact brute-force search, whatever the raw model's index; the
  sparse side of bm25 and hybrid in core ops too."""
  starts, limits = block_piece_offsets(trained.tokenizer, trained.blocks, trained.orqa.max_block_len, log=log)
  if sparse is None:
    sparse = build_sparse(trained, retriever)
  module = OpenQaTokenIdsModule(trained.model, trained.featurizer, trained.blocks, starts, limits, retriever,
                                sparse, bm25_weight)
  return _save(
      module, module.answer, path,
      dict(_token_ids_info(info, loader.OPEN_QA, trained.tokenizer, _QUESTION_INPUTS),
           **_retriever_info(module),
           index="brute_force",
           num_blocks=trained.model.num_blocks,
           reader_beam=trained.model.reader_beam,
           max_span_width=trained.orqa.max_span_width,
           checkpoint=trained.checkpoint), _TOKEN_ID_KEYS, trained.tokenizer.vocab_path)


def export_all(model_dir: str,
               output_dir: str,
               checkpoint: Optional[str] = None,
               index: str = "brute_force",
               scann_options: Optional[scann_index.ScannOptions] = None,
               log: Callable[[str], None] = print,
               token_ids: bool = True,
               index_dir: Optional[str] = None,
               retriever: str = hybrid.DENSE,
               hybrid_bm25_weight: Optional[float] = None) -> Dict[str, str]:
  """Exports a model dir into output_dir/{query_embedder, document_embedder[, open_qa]}, and with
  token_ids their core-ops twins {...}_token_ids (see the module docstring); open_qa retrieves by
  retriever (RETRIEVER_CHOICES: its dense tower, BM25 or their hybrid; with hybrid_bm25_weight the
  hybrid's weighted score sum).

  A bin/train_orqa model dir (orqa_config.json) gives all three, from its best checkpoint by default.
  A converted orqa_from_realm checkpoint (bin/convert_checkpoint) with index_dir, the converted
  block_emb and its blocks (orqa_model.load_converted), gives query_embedder and open_qa: no
  document_embedder, as the tower that embedded the released blocks (REALM's embedder) is not in it.
  Any other run with a realm_config.json (bin/train_realm, bin/train_ict, a converted checkpoint
  without index_dir) gives the two embedders, from its latest checkpoint by default.
  """
  conversion = released_conversion.read_conversion(model_dir) or {}
  if conversion.get("layout") == released.BLOCK_EMB:
    raise ValueError(f"{model_dir} holds converted block embeddings (an index), not a model: pass it "
                     "as index_dir (--index_dir) and the converted ORQA checkpoint as model_dir "
                     "(--model_dir)")
  converted_orqa = conversion.get("layout") == released.ORQA_FROM_REALM
  if index_dir is not None and not converted_orqa:
    raise ValueError(f"index_dir (--index_dir={index_dir}) is for a converted ORQA checkpoint "
                     f"(bin/convert_checkpoint's orqa_from_realm output); {model_dir} is not one "
                     f"(conversion.json layout: {conversion.get('layout')}). A bin/train_orqa run "
                     "carries its own index: omit --index_dir")
  check_retriever(retriever, hybrid_bm25_weight)
  config = realm_config_lib.RealmConfig.load(model_dir)
  paths = {}

  def embedders(query_embedder, doc_embedder, info):
    out = os.path.join
    for kind, export, export_twin, embedder in ((QUERY_EMBEDDER, export_query_embedder,
                                                 export_query_embedder_token_ids, query_embedder),
                                                (DOCUMENT_EMBEDDER, export_document_embedder,
                                                 export_document_embedder_token_ids, doc_embedder)):
      if embedder is None:
        continue
      paths[kind] = export(config, embedder, out(output_dir, kind), info)
      if token_ids:
        twin = kind + loader.TOKEN_IDS_SUFFIX
        paths[twin] = export_twin(config, embedder, out(output_dir, twin), info)

  def open_qa(trained, info):
    sparse = build_sparse(trained, retriever)  # once for both signatures
    if sparse is not None:
      log(f"{retriever}: BM25 over the wordpieces of the {sparse.num_docs} blocks ("
          f"{sparse.parameters['postings']} postings)")
    paths[loader.OPEN_QA] = export_open_qa(trained, os.path.join(output_dir, loader.OPEN_QA), index,
                                           scann_options, info, retriever, sparse, hybrid_bm25_weight)
    if token_ids:
      twin = loader.OPEN_QA + loader.TOKEN_IDS_SUFFIX
      paths[twin] = export_open_qa_token_ids(trained, os.path.join(output_dir, twin), info, log, retriever,
                                             sparse, hybrid_bm25_weight)

  if tf.io.gfile.exists(os.path.join(model_dir, "orqa_config.json")):
    trained = orqa_model.load_trained(model_dir, checkpoint)
    info = {"model_dir": os.path.abspath(model_dir), "checkpoint": trained.checkpoint}
    log(f"exporting {trained.checkpoint}")
    embedders(trained.model.retriever.query_embedder, trained.model.retriever.doc_embedder, info)
    open_qa(trained, info)
  elif index_dir is not None:
    trained = orqa_model.load_converted(model_dir, index_dir, checkpoint)
    info = {
        "model_dir": os.path.abspath(model_dir),
        "checkpoint": trained.checkpoint,
        "index_dir": os.path.abspath(index_dir),
        "source": conversion.get("source"),
        "query_seq_len": config.query_seq_len,
        "reader_seq_len": trained.orqa.reader_seq_len
    }
    log(f"exporting converted ORQA {trained.checkpoint} over the {trained.model.num_blocks} blocks of "
        f"{index_dir} (no document_embedder: the released blocks were embedded by REALM's embedder, "
        "not this checkpoint; export its conversion for that)")
    embedders(trained.model.retriever.query_embedder, None, info)
    open_qa(trained, info)
  else:
    if retriever != hybrid.DENSE:
      raise ValueError(f"--retriever={retriever}: {model_dir} is not an ORQA run, so no open_qa model is "
                       "exported to retrieve by it; omit --retriever, or export a bin/train_orqa run (or a "
                       "converted ORQA checkpoint with --index_dir)")
    config_path = os.path.join(model_dir, realm_config_lib.CONFIG_NAME)
    corpus_lib.check_vocab(config.vocab_path,
                           None,
                           config.vocab_sha256,
                           config_path,
                           source=f"{config_path}'s vocab_path")
    towers = config.build_retriever()
    resolved = training_state.restore_retriever(towers, checkpoint or model_dir)
    info = {"model_dir": os.path.abspath(model_dir), "checkpoint": resolved}
    log(f"exporting the retriever of {resolved} (not an ORQA run: no open-QA model" +
        ("; pass --index_dir=<converted block_emb> for one)" if converted_orqa else ")"))
    embedders(towers.query_embedder, towers.doc_embedder, info)
  for kind, path in paths.items():
    log(f"wrote {kind} SavedModel to {path}")
  return paths
