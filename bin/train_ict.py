r"""ICT pre-training of the retriever embedder (the warm start of REALM's retriever).

  python bin/train_ict.py --model_dir=/runs/ict --vocab_path=vocab.txt --bert_config=bert_base \
      --pretraining_corpus_path=/data/pretrain/sentences --init_bert_checkpoint=/bert/bert_model.ckpt \
      --batch_size=4096 --num_train_steps=100000 --strategy=tpu --tpu=my-tpu

Every option is also a key of a config file (realm_tf/config/train_ict.py; docs/configuration.md); the run
writes them all to MODEL_DIR/train_ict.yaml, from which --config_file resumes or repeats it.
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

from absl import app
from absl import logging

from realm_tf.config import run_config
from realm_tf.config import train_ict
from realm_tf.tasks import ict_trainer

_CONFIG = run_config.define_flags(train_ict.TrainIctConfig)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  config = _CONFIG.resolve()
  strategy = config.device.setup()
  options = config.trainer_options(config.model.bert())
  with run_config.saved_for_the_run(config, config.model_dir, config.BINARY, logging.info):
    ict_trainer.train(options, strategy, log=logging.info)


if __name__ == "__main__":
  app.run(main)
