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
"""

from absl import app
from absl import flags
from absl import logging

from realm_tf.data import mlm as mlm_data
from realm_tf.training import mlm_trainer
from realm_tf.training import trainer_flags

_FLAGS = trainer_flags.define_trainer_flags(batch_size=32, learning_rate=1e-4, num_train_steps=10000,
                                            save_checkpoints_steps=1000)
_INPUT = flags.DEFINE_string("input_path", None, "JSONL or TSV documents to pre-train on.",
                             required=True)
_INIT = flags.DEFINE_string(
    "init_checkpoint", None,
    "Continue pre-training from this BERT (TF1 Google BERT, Model Garden TF2, Hugging Face safetensors "
    "file or directory); without it, random weights.")
_MAX_SEQ_LEN = flags.DEFINE_integer("max_seq_len", 128, "Packed length of [CLS] a [SEP] b [SEP].")
_MAX_PREDICTIONS = flags.DEFINE_integer("max_predictions_per_seq", 20, "Predicted positions per example.")
_MASK_RATE = flags.DEFINE_float("masked_lm_prob", 0.15, "Share of wordpieces predicted (BERT: 0.15).")
_SHORT = flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter packed example.")
_WWM = flags.DEFINE_bool("whole_word_masking", False, "Mask all wordpieces of a word together.")
_RANDOM_NEXT = flags.DEFINE_float(
    "random_next_rate", 0.0, "Share of pairs whose second segment comes from another random document "
    "(BERT's random next sentences, 0.5 in BERT; no next-sentence loss). 0: it always follows the first.")
_WARMUP = flags.DEFINE_integer("warmup_steps", None,
                               "Learning-rate warmup steps (default: the original's rule).")
_EVAL_PERCENT = flags.DEFINE_float("eval_percent", 5.0,
                                   "Percent of the documents held out for masked-token accuracy.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  strategy, bert = _FLAGS.setup()
  options = mlm_trainer.MlmTrainerOptions(
      bert_config=bert, vocab_path=_FLAGS.vocab_path.value, input_path=_INPUT.value,
      loop=_FLAGS.loop_options(),
      masking=mlm_data.MaskingOptions(max_seq_len=_MAX_SEQ_LEN.value,
                                      max_predictions=_MAX_PREDICTIONS.value,
                                      mask_rate=_MASK_RATE.value, short_seq_prob=_SHORT.value,
                                      whole_word_masking=_WWM.value,
                                      random_next_rate=_RANDOM_NEXT.value),
      do_lower_case=_FLAGS.do_lower_case.value, batch_size=_FLAGS.batch_size.value,
      learning_rate=_FLAGS.learning_rate.value, warmup_steps=_WARMUP.value,
      adam_bias_correction=_FLAGS.adam_bias_correction.value, init_checkpoint=_INIT.value,
      eval_percent=_EVAL_PERCENT.value, seed=_FLAGS.seed.value)
  mlm_trainer.train(options, strategy, log=logging.info)


if __name__ == "__main__":
  app.run(main)
