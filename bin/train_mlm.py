r"""BERT masked-LM pre-training (or continued pre-training) on a text corpus: the reader's warm start.

  # a tiny BERT from scratch on testdata (what bin/demo does)
  python bin/train_mlm.py --model_dir=/runs/mlm --input_path=testdata/corpus.jsonl \
      --vocab_path=testdata/vocab.txt --bert_config=tiny --num_train_steps=2000
  # all-MiniLM-L6-v2 (no masked-LM head: one is created) adapted to the SQuAD paragraphs
  python bin/train_mlm.py --model_dir=/runs/minilm_mlm --input_path=squad-v1.1-paragraphs.tsv \
      --vocab_path=MINILM/vocab.txt --bert_config=MINILM/config.json --init_checkpoint=MINILM

Input: JSONL {"title", "text"/"body"} or DPR-style TSV, as the corpora. Writes MODEL_DIR/bert/ (a Model
Garden checkpoint with the masked-LM head, bert_config.json, vocab.txt, eval.json with the held-out
masked-token accuracy): pass it as --init_reader_checkpoint to bin/train_realm.

Every option is also a key of a config file (realm_tf/config/train_mlm.py; docs/configuration.md); the run
writes them all to MODEL_DIR/train_mlm.yaml, from which --config_file resumes or repeats it.
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

from absl import app
from absl import logging

from realm_tf.config import run_config
from realm_tf.config import train_mlm
from realm_tf.tasks import mlm_trainer

_CONFIG = run_config.define_flags(train_mlm.TrainMlmConfig)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  config = _CONFIG.resolve()
  strategy = config.device.setup()
  options = config.trainer_options(config.model.bert())
  with run_config.saved_for_the_run(config, config.model_dir, config.BINARY, logging.info):
    mlm_trainer.train(options, strategy, log=logging.info)


if __name__ == "__main__":
  app.run(main)
