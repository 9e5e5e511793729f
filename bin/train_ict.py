r"""ICT pre-training of the retriever embedder (the warm start of REALM's retriever).

  python bin/train_ict.py --model_dir=/runs/ict --vocab_path=vocab.txt --bert_config=bert_base \
      --pretraining_corpus_path=/data/pretrain/sentences --init_bert_checkpoint=/bert/bert_model.ckpt \
      --batch_size=4096 --num_train_steps=100000 --strategy=tpu --tpu=my-tpu
"""

from absl import app
from absl import flags
from absl import logging

from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.training import distribute
from realm_tf.training import flags_util
from realm_tf.training import ict_trainer
from realm_tf.training import loop

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Checkpoints and summaries.", required=True)
_PRETRAINING = flags.DEFINE_string("pretraining_corpus_path", None,
                                   "Prefix of bin/generate_pretraining_corpus output.", required=True)
_VOCAB = flags.DEFINE_string("vocab_path", None, "BERT vocab file.", required=True)
_LOWER = flags.DEFINE_bool("do_lower_case", True, "Uncased vocab.")
_BERT = flags.DEFINE_string("bert_config", "tiny", "Preset (tiny, bert_base) or bert_config.json path.")
_INIT_BERT = flags.DEFINE_string("init_bert_checkpoint", None,
                                 "BERT warm start (TF1 Google BERT, HF safetensors, Model Garden TF2).")
_PROJECTION = flags.DEFINE_integer("projection_size", 128, "Embedding dimension D.")
_EPSILON = flags.DEFINE_float("layer_norm_epsilon", 1e-3, "Embedder LayerNorm epsilon (ICT: 1e-3).")
_DROPOUT = flags.DEFINE_float("dropout_rate", 0.1, "Embedder dropout in training (ICT: 0.1).")
_Q = flags.DEFINE_integer("query_seq_len", 64, "Query length.")
_C = flags.DEFINE_integer("block_seq_len", 288, "Block length.")
_MASK_RATE = flags.DEFINE_float("mask_rate", 0.9, "Probability of removing the sentence from its block.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Global batch size (in-batch negatives).")
_LR = flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.")
_BIAS_CORRECTION = flags.DEFINE_bool("adam_bias_correction", False, "Adam bias correction.")
_STEPS = flags.DEFINE_integer("num_train_steps", 1000, "Steps to train.")
_SAVE = flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint interval.")
_KEEP = flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept.")
_LOG = flags.DEFINE_integer("log_every_steps", 10, "Progress line interval.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the example stream.")
_STRATEGY = flags.DEFINE_enum("strategy", "cpu", distribute.STRATEGIES, "Distribution strategy.")
_TPU = flags.DEFINE_string("tpu", "", "TPU name or grpc:// address for --strategy=tpu.")
_NUM_CPU = flags.DEFINE_integer("num_cpu_devices", 1, "Logical CPUs for --strategy=mirrored on CPU.")
_JIT = flags.DEFINE_bool("jit_compile", True, "Compile the train step with XLA.")
_PRECISION = flags.DEFINE_enum("mixed_precision", "float32", ["float32", "mixed_bfloat16"],
                               "Keras precision policy.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  strategy = flags_util.strategy_from_flags(_STRATEGY.value, _TPU.value, _NUM_CPU.value)
  flags_util.set_precision(_PRECISION.value)
  bert = flags_util.bert_config(_BERT.value, _VOCAB.value)
  config = realm_config_lib.RealmConfig(
      retriever_bert=bert, reader_bert=bert, vocab_path=_VOCAB.value, do_lower_case=_LOWER.value,
      projection_size=_PROJECTION.value, embedder_layer_norm_epsilon=_EPSILON.value,
      embedder_dropout_rate=_DROPOUT.value, query_seq_len=_Q.value, candidate_seq_len=_C.value)
  options = ict_trainer.IctTrainerOptions(
      config=config,
      loop=loop.LoopOptions(model_dir=_MODEL_DIR.value, num_train_steps=_STEPS.value,
                            save_checkpoints_steps=_SAVE.value, keep_checkpoint_max=_KEEP.value,
                            log_every_steps=_LOG.value, jit_compile=_JIT.value),
      pretraining_corpus_path=_PRETRAINING.value, block_seq_len=_C.value, batch_size=_BATCH.value,
      learning_rate=_LR.value, mask_rate=_MASK_RATE.value,
      adam_bias_correction=_BIAS_CORRECTION.value, init_bert_checkpoint=_INIT_BERT.value,
      seed=_SEED.value)
  ict_trainer.train(options, strategy, log=logging.info)


if __name__ == "__main__":
  app.run(main)
