r"""ICT pre-training of the retriever embedder (the warm start of REALM's retriever).

  python bin/train_ict.py --model_dir=/runs/ict --vocab_path=vocab.txt --bert_config=bert_base \
      --pretraining_corpus_path=/data/pretrain/sentences --init_bert_checkpoint=/bert/bert_model.ckpt \
      --batch_size=4096 --num_train_steps=100000 --strategy=tpu --tpu=my-tpu
"""

from absl import app
from absl import flags
from absl import logging

from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.training import ict_trainer
from realm_tf.training import trainer_flags

_FLAGS = trainer_flags.define_trainer_flags(batch_size=32, learning_rate=1e-4, num_train_steps=1000,
                                            save_checkpoints_steps=1000)
_PRETRAINING = trainer_flags.define_pretraining_corpus_flag()
_INIT_BERT = flags.DEFINE_string("init_bert_checkpoint", None,
                                 "BERT warm start (TF1 Google BERT, HF safetensors, Model Garden TF2).")
_PROJECTION = flags.DEFINE_integer("projection_size", 128, "Embedding dimension D.")
_EPSILON = flags.DEFINE_float("layer_norm_epsilon", 1e-3, "Embedder LayerNorm epsilon (ICT: 1e-3).")
_DROPOUT = flags.DEFINE_float("dropout_rate", 0.1, "Embedder dropout in training (ICT: 0.1).")
_Q = flags.DEFINE_integer("query_seq_len", 64, "Query length.")
_C = flags.DEFINE_integer("block_seq_len", 288, "Block length.")
_MASK_RATE = flags.DEFINE_float("mask_rate", 0.9, "Probability of removing the sentence from its block.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  strategy, bert = _FLAGS.setup()
  config = realm_config_lib.RealmConfig(
      retriever_bert=bert, reader_bert=bert, vocab_path=_FLAGS.vocab_path.value,
      do_lower_case=_FLAGS.do_lower_case.value, projection_size=_PROJECTION.value,
      embedder_layer_norm_epsilon=_EPSILON.value, embedder_dropout_rate=_DROPOUT.value,
      query_seq_len=_Q.value, candidate_seq_len=_C.value,
      embedder_pooling=_FLAGS.embedder_pooling.value, cosine_score_scale=_FLAGS.cosine_score_scale.value)
  options = ict_trainer.IctTrainerOptions(
      config=config, loop=_FLAGS.loop_options(), pretraining_corpus_path=_PRETRAINING.value,
      block_seq_len=_C.value, batch_size=_FLAGS.batch_size.value,
      learning_rate=_FLAGS.learning_rate.value, mask_rate=_MASK_RATE.value,
      adam_bias_correction=_FLAGS.adam_bias_correction.value, init_bert_checkpoint=_INIT_BERT.value,
      seed=_FLAGS.seed.value)
  ict_trainer.train(options, strategy, log=logging.info)


if __name__ == "__main__":
  app.run(main)
