r"""Retriever training by distilling a Fusion-in-Decoder reader's cross-attention (FiD-KD), iterated.

Each iteration retrieves the top --num_passages passages of every training question with the current
retriever, trains a fresh FiD reader on them for --reader_steps, scores the passages with the reader's
cross-attention, trains the retriever with the KL loss for --retriever_steps and re-embeds the corpus
(realm_tf.tasks.fid_kd). Every iteration's artifacts go to MODEL_DIR/iteration_<i>/; a restarted run
skips the iterations whose metrics.json exists.
  python bin/train_fid_kd.py --model_dir=/runs/fidkd --vocab_path=testdata/vocab.txt \
      --retrieval_corpus_path=/tmp/blocks --train_path=testdata/qa.train.jsonl \
      --dev_path=testdata/qa.dev.jsonl --iterations=2 --initial_passages=bm25

Every option is also a key of a config file (realm_tf/config/train_fid_kd.py; docs/configuration.md); the
run writes them all to MODEL_DIR/train_fid_kd.yaml, from which --config_file resumes or repeats it.
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

from absl import app
from absl import logging

from realm_tf.config import run_config
from realm_tf.config import train_fid_kd
from realm_tf.tasks import fid_kd

_CONFIG = run_config.define_flags(train_fid_kd.TrainFidKdConfig)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  config = _CONFIG.resolve()
  try:
    options = config.trainer_options(config.model.bert())
  except run_config.ConfigError as e:
    raise app.UsageError(str(e)) from None
  with run_config.saved_for_the_run(config,
                                    config.model_dir,
                                    config.BINARY,
                                    logging.info,
                                    progress=train_fid_kd.rounds_done):
    for metrics in fid_kd.run(options, log=logging.info):
      before, after = metrics["recall_before"], metrics["recall_after"]
      logging.info(
          "iteration %d: reader dev EM %.1f, teacher gold top-1 %.1f%%; gold recall@5 %.1f -> "
          "%.1f; %s, ends with %s", metrics["iteration"], metrics["reader_exact_match"],
          metrics.get("reader_gold_top1", float("nan")), before.get("gold_recall@5", float("nan")),
          after.get("gold_recall@5", float("nan")),
          "accepted" if metrics.get("accepted", True) else "REJECTED",
          metrics.get("retriever_after", "its distilled retriever"))


if __name__ == "__main__":
  app.run(main)
