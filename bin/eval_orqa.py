r"""Evaluates a bin/train_orqa model dir on a QA file: exact match, regex match, F1, retriever recall@k.

Restores the best checkpoint (MODEL_DIR/best_metric.json; else the latest, or --checkpoint), predicts
every question (the reader reads the top reader_beam blocks the chosen retriever returns), prints a table
and writes OUTPUT_DIR/<name>.metrics.json and OUTPUT_DIR/<name>.predictions.jsonl
({question, prediction, score, retrieved_ids, predicted_id} per line):
  python bin/eval_orqa.py --model_dir=/runs/orqa_nq --qa_path=NQ-open.dev.jsonl
  python bin/eval_orqa.py --model_dir=/runs/orqa_nq --qa_path=NQ-open.dev.jsonl --retriever=dense,bm25,hybrid

--retriever (realm_tf/retrieval/hybrid.py): dense (the model's own tower, the default), bm25 (over the
corpus's titles and bodies), hybrid (reciprocal rank fusion of the two), gold (each question's own
document, named by its QA record's "doc_id": the reader's ceiling). With several, each gets its row in
one table; <name> is the QA file's base name, followed by .<retriever> for all but dense.
--hybrid_bm25_weight=W fuses the hybrid by a weighted sum of z-normalised scores instead (W for BM25,
1 - W for the dense tower; its row and files are named hybrid_wW); tune W on held-out questions, never on
the questions you report.
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

from absl import app
from absl import flags
from absl import logging

from realm_tf.config import trainer_flags
from realm_tf.retrieval import hybrid
from realm_tf.runs import orqa_evaluation

_MODEL_DIR = trainer_flags.define_model_dir_flag("A bin/train_orqa model dir.")
_QA = flags.DEFINE_string("qa_path",
                          None, "QA file (any realm_tf.data.qa.load_qa input; CuratedTREC "
                          "answers are regular expressions).",
                          required=True)
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Checkpoint to evaluate instead of the best.")
_OUTPUT = flags.DEFINE_string("output_dir", None, "Where metrics and predictions go (MODEL_DIR/eval).")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Prediction batch size.")
_RETRIEVER = flags.DEFINE_list(
    "retriever", [hybrid.DENSE], f"What the reader reads: {', '.join(hybrid.RETRIEVERS)} (comma-separated "
    "for several; see the module docstring).")
_HYBRID_WEIGHT = flags.DEFINE_float(
    "hybrid_bm25_weight", None, "With it, --retriever=hybrid ranks by W x BM25's + (1 - W) x the dense "
    "tower's z-normalised scores (W in [0, 1], tuned on held-out questions) instead of reciprocal rank "
    "fusion.")
_JIT = flags.DEFINE_bool(
    "jit_compile", False, "Compile the prediction step with XLA: faster per question after seconds of "
    "compiling; for thousands of questions.")
_READER_BEAM = flags.DEFINE_integer(
    "reader_beam_size",
    None, "Blocks the reader reads of each retriever's ranking, instead of the run's own "
    "(train_orqa.yaml); the output files' names then end in .reader_beamN.",
    lower_bound=1)
_RECALL = trainer_flags.define_recall_flags(orqa_evaluation.DEFAULT_RECALL_KS)
_SKIP_INVALID = trainer_flags.define_skip_invalid_flag()
_DEVICE = trainer_flags.define_device_flags()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  try:  # before anything loads: a misspelt retriever fails in a second, not after the model is built
    hybrid.check_retrievers(_RETRIEVER.value)
    hybrid.check_bm25_weight(_HYBRID_WEIGHT.value)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  strategy = _DEVICE.setup()
  ks = _RECALL.ks()
  results = orqa_evaluation.evaluate_retrievers(_MODEL_DIR.value,
                                                _QA.value,
                                                _RETRIEVER.value,
                                                output_dir=_OUTPUT.value,
                                                checkpoint=_CHECKPOINT.value,
                                                batch_size=_BATCH.value,
                                                ks=ks,
                                                skip_invalid=_SKIP_INVALID.value,
                                                strategy=strategy,
                                                log=logging.info,
                                                hybrid_bm25_weight=_HYBRID_WEIGHT.value,
                                                jit_compile=_JIT.value,
                                                reader_beam_size=_READER_BEAM.value)
  for retriever, result in results.items():
    table = {k: v for k, v in result.items() if isinstance(v, (int, float)) and k != "seconds"}
    print(f"{result['qa_path']} with {result['checkpoint']}, retriever {retriever}:")
    print(orqa_evaluation.format_metrics(table))
    print(f"metrics: {result['metrics_path']}\npredictions: {result['predictions_path']}")
  if len(results) > 1:
    print(orqa_evaluation.format_retriever_table(results, ks))


if __name__ == "__main__":
  app.run(main)
