r"""ORQA fine-tuning: open-domain QA on a frozen index with a trainable query tower and span reader.

The corpus is embedded ONCE at the start with the document tower of --retriever_checkpoint (or taken from
--index_dir, a published REALM index of the same corpus) and frozen; every --eval_every_steps the model
is evaluated on --dev_path and the best checkpoint by dev accuracy is kept in MODEL_DIR/best/:
  python bin/train_orqa.py --model_dir=/runs/orqa_nq --vocab_path=vocab.txt --bert_config=bert_base \
      --retriever_checkpoint=/runs/realm --retrieval_corpus_path=/data/corpus/blocks \
      --reader_checkpoint=/bert/bert_model.ckpt --train_path=NQ-open.train.jsonl \
      --dev_path=NQ-open.dev.jsonl --batch_size=8 --num_train_steps=100000 --strategy=tpu --tpu=my-tpu

Every option is also a key of a config file (realm_tf/config/train_orqa.py; docs/configuration.md); the run
writes them all to MODEL_DIR/train_orqa.yaml, from which --config_file resumes or repeats it.
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

from absl import app
from absl import logging

from realm_tf.config import run_config
from realm_tf.config import train_orqa
from realm_tf.tasks import orqa_trainer

_CONFIG = run_config.define_flags(train_orqa.TrainOrqaConfig)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  config = _CONFIG.resolve()
  strategy = config.device.setup()
  options = config.trainer_options(config.model.bert())
  with run_config.saved_for_the_run(config, config.model_dir, config.BINARY, logging.info):
    summary = orqa_trainer.train(options, strategy, log=logging.info)
  best = summary.get("best")
  if best:
    logging.info("best dev %s %.2f at step %d: %s", best["metric"], best["value"], best["step"],
                 best["checkpoint"])


if __name__ == "__main__":
  app.run(main)
