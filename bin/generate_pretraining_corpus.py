r"""Writes the REALM pre-training corpus (realm_tf.data.pretraining) from raw or pre-annotated text.

  python bin/generate_pretraining_corpus.py --input_path=docs.jsonl \
      --output_prefix=/data/pretraining/wiki --num_output_shards=50

Input: JSONL of {"title", "text"}, optionally pre-annotated with "sentences" and "spans" (UTF-8 byte
offsets into text, as testdata/pretraining.jsonl), or a DPR-style TSV (id, text, title). Documents
without annotations are split into sentences and annotated with salient spans (dates and capitalized
entities by default; --annotator=my_pkg.ner:Tagger plugs in a real NER model). The output is the
original's format: GZIP TFRecord shards of title, text, sentence_byte_{start,limit},
span_byte_{start,limit}, plus PREFIX.manifest.json.
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

from absl import app
from absl import flags
from absl import logging

from realm_tf.config import trainer_flags
from realm_tf.data import pretraining
from realm_tf.data import salient_spans
from realm_tf.data import text_records

_CORPUS = trainer_flags.define_document_corpus_flags()
_ANNOTATOR = flags.DEFINE_string(
    "annotator", "builtin",
    "Salient-span annotator for documents without spans: builtin (dates + capitalized entities), dates, "
    "entities, or module.path:ClassOrFactory (a realm_tf.data.salient_spans.SpanAnnotator); a comma-"
    "separated list combines several. Ignored for pre-annotated input unless --reannotate.")
_SENTENCE_SPLITTER = flags.DEFINE_string(
    "sentence_splitter", "builtin",
    "Sentence splitter for documents without sentences: builtin (rules), lines, none, or "
    "module.path:ClassOrFactory (a realm_tf.data.salient_spans.SentenceSplitter).")
_REANNOTATE = flags.DEFINE_bool(
    "reannotate", False, "Recompute sentences and spans of pre-annotated input instead of keeping them.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  try:
    annotator = salient_spans.load_annotator(_ANNOTATOR.value)
    splitter = salient_spans.load_sentence_splitter(_SENTENCE_SPLITTER.value)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  skipped = text_records.SkipCounter() if _CORPUS.skip_invalid.value else None

  def documents():
    return pretraining.read_raw_documents(_CORPUS.input_path.value, skipped, reannotate=_REANNOTATE.value)

  try:
    stats = pretraining.write_pretraining_corpus(documents,
                                                 _CORPUS.output_prefix.value,
                                                 _CORPUS.num_output_shards.value,
                                                 annotator=annotator,
                                                 sentence_splitter=splitter,
                                                 skipped=skipped,
                                                 log=logging.info)
  except text_records.InputError as e:
    raise app.UsageError(str(e)) from e
  if skipped is not None:
    logging.info(skipped.summary("documents"))
  if stats.num_annotated:
    logging.info("annotated %d documents with %s (sentences: %s)", stats.num_annotated, annotator.name,
                 splitter.name)
  logging.info("wrote %s under %s", stats.summary(), _CORPUS.output_prefix.value)
  print(f"wrote {stats.summary()} under {_CORPUS.output_prefix.value}")


if __name__ == "__main__":
  app.run(main)
