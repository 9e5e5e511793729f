r"""Tokenizes raw documents into the sharded TFRecord retrieval corpus (realm_tf.data.corpus).

  python bin/generate_retrieval_corpus.py --input_path=docs.jsonl --vocab_path=vocab.txt \
      --output_prefix=/data/corpus/blocks --num_output_shards=50

Input: JSONL of {"title", "body"} (or "text"; optional "id"), or a DPR-style TSV (id, text, title).
"""

from absl import app
from absl import flags
from absl import logging

from realm_tf import tokenization
from realm_tf.data import corpus
from realm_tf.data import text_records

_INPUT_PATH = flags.DEFINE_string("input_path", None, "JSONL or TSV file of documents.", required=True)
_OUTPUT_PREFIX = flags.DEFINE_string("output_prefix", None, "Path prefix of the output shards.",
                                     required=True)
_VOCAB_PATH = flags.DEFINE_string("vocab_path", None, "BERT vocab file.", required=True)
_DO_LOWER_CASE = flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased BERT).")
_NUM_OUTPUT_SHARDS = flags.DEFINE_integer("num_output_shards", 50, "Number of shards.")
_SKIP_INVALID = flags.DEFINE_bool("skip_invalid", False,
                                  "Skip malformed records (and report how many) instead of failing.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  tokenizer = tokenization.Tokenizer(_VOCAB_PATH.value, do_lower_case=_DO_LOWER_CASE.value)
  skipped = text_records.SkipCounter() if _SKIP_INVALID.value else None

  def documents():
    if skipped is not None:
      skipped.reset()  # write_corpus reads the input twice; count each skip once
    return corpus.read_documents(_INPUT_PATH.value, skipped)

  try:
    stats = corpus.write_corpus(documents, tokenizer, _OUTPUT_PREFIX.value, _NUM_OUTPUT_SHARDS.value,
                                skipped=skipped, log=logging.info)
  except text_records.InputError as e:
    raise app.UsageError(str(e)) from e
  if skipped is not None:
    logging.info(skipped.summary("documents"))
  logging.info("wrote %d documents into %d shards under %s (%d duplicate uids; body wordpieces: mean "
               "%.1f, max %d)", stats.num_documents, stats.num_shards, _OUTPUT_PREFIX.value,
               stats.num_duplicate_uids, stats.mean_body_wordpieces, stats.max_body_wordpieces)


if __name__ == "__main__":
  app.run(main)
