r"""Tokenizes raw documents into the sharded TFRecord retrieval corpus (realm_tf.data.corpus).

  python bin/generate_retrieval_corpus.py --input_path=docs.jsonl --vocab_path=vocab.txt \
      --output_prefix=/data/corpus/blocks --num_output_shards=50

Input: JSONL of {"title", "body"} (or "text"; optional "id"), or a DPR-style TSV (id, text, title).
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

from absl import app
from absl import logging

from realm_tf import tokenization
from realm_tf.config import trainer_flags
from realm_tf.data import corpus
from realm_tf.data import text_records

_CORPUS = trainer_flags.define_document_corpus_flags()
_VOCAB = trainer_flags.define_vocab_flags()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  tokenizer = tokenization.Tokenizer(_VOCAB.vocab_path.value, do_lower_case=_VOCAB.do_lower_case.value)
  skipped = text_records.SkipCounter() if _CORPUS.skip_invalid.value else None

  def documents():
    if skipped is not None:
      skipped.reset()  # write_corpus reads the input twice; count each skip once
    return corpus.read_documents(_CORPUS.input_path.value, skipped)

  try:
    stats = corpus.write_corpus(documents,
                                tokenizer,
                                _CORPUS.output_prefix.value,
                                _CORPUS.num_output_shards.value,
                                skipped=skipped,
                                log=logging.info)
  except text_records.InputError as e:
    raise app.UsageError(str(e)) from e
  if skipped is not None:
    logging.info(skipped.summary("documents"))
  logging.info(
      "wrote %d documents into %d shards under %s (%d duplicate uids; body wordpieces: mean "
      "%.1f, max %d)", stats.num_documents, stats.num_shards, _CORPUS.output_prefix.value,
      stats.num_duplicate_uids, stats.mean_body_wordpieces, stats.max_body_wordpieces)


if __name__ == "__main__":
  app.run(main)
