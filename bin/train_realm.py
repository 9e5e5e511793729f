r"""REALM pre-training: trains the retriever and the knowledge-augmented encoder together.

Run beside bin/refresh_doc_embeds, which keeps the index fresh:
  python bin/train_realm.py --model_dir=/runs/realm --vocab_path=vocab.txt --bert_config=bert_base \
      --pretraining_corpus_path=/data/pretrain/sentences --retrieval_corpus_path=/data/corpus/blocks \
      --init_retriever_checkpoint=/runs/ict --init_reader_checkpoint=/bert/bert_model.ckpt \
      --strategy=tpu --tpu=my-tpu --batch_size=512 --num_train_steps=200000

Every option is also a key of a config file (realm_tf/config/train_realm.py; docs/configuration.md). The
run writes all of them to MODEL_DIR/train_realm.yaml; resume or repeat it from there:
  python bin/train_realm.py --config_file=/runs/realm/train_realm.yaml \
      --params_override=train.num_train_steps=400000
--help lists the daily flags, --helpfull all of them.
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

from absl import app
from absl import logging

from realm_tf.config import run_config
from realm_tf.config import train_realm
from realm_tf.tasks import realm_trainer

_CONFIG = run_config.define_flags(train_realm.TrainRealmConfig)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  config = _CONFIG.resolve()
  strategy = config.device.setup()
  options = config.trainer_options(config.model.bert())
  with run_config.saved_for_the_run(config, config.model_dir, config.BINARY, logging.info):
    realm_trainer.train(options, strategy, log=logging.info)


if __name__ == "__main__":
  app.run(main)
