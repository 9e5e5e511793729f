r"""REALM pre-training: trains the retriever and the knowledge-augmented encoder together.

Run beside bin/refresh_doc_embeds, which keeps the index fresh:
  python bin/train_realm.py --model_dir=/runs/realm --vocab_path=vocab.txt --bert_config=bert_base \
      --pretraining_corpus_path=/data/pretrain/sentences --retrieval_corpus_path=/data/corpus/blocks \
      --init_retriever_checkpoint=/runs/ict --init_reader_checkpoint=/bert/bert_model.ckpt \
      --strategy=tpu --tpu=my-tpu --batch_size=512 --num_train_steps=200000
"""

from absl import app
from absl import flags
from absl import logging

from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.training import distribute
from realm_tf.training import flags_util
from realm_tf.training import loop
from realm_tf.training import realm_trainer

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Checkpoints, summaries, indexes.", required=True)
_PRETRAINING = flags.DEFINE_string("pretraining_corpus_path", None,
                                   "Prefix of bin/generate_pretraining_corpus output.", required=True)
_RETRIEVAL = flags.DEFINE_string("retrieval_corpus_path", None,
                                 "Prefix of bin/generate_retrieval_corpus output.", required=True)
_VOCAB = flags.DEFINE_string("vocab_path", None, "BERT vocab file.", required=True)
_LOWER = flags.DEFINE_bool("do_lower_case", True, "Uncased vocab.")
_BERT = flags.DEFINE_string("bert_config", "tiny", "Preset (tiny, bert_base) or bert_config.json path.")
_PROJECTION = flags.DEFINE_integer("projection_size", 128, "Retriever dimension D.")
_EPSILON = flags.DEFINE_float("embedder_layer_norm_epsilon", 1e-12,
                              "Embedder LayerNorm epsilon (1e-3 when warm-starting from ICT).")
_SHARE = flags.DEFINE_bool("share_embedders", True, "One tower for queries and documents.")
_SCORE_SCALE = flags.DEFINE_float("retrieval_score_scale", 1.0,
                                   "Scale of q.d before the candidate softmax (1.0: the original; "
                                   "1/sqrt(projection_size) keeps a fresh retriever unsaturated).")
_Q = flags.DEFINE_integer("query_seq_len", 96, "Q.")
_C = flags.DEFINE_integer("candidate_seq_len", 288, "C.")
_M = flags.DEFINE_integer("max_masks", 10, "M.")
_N = flags.DEFINE_integer("num_candidates", 8, "N, including the null document.")
_BATCH = flags.DEFINE_integer("batch_size", 16, "Global batch size.")
_LR = flags.DEFINE_float("learning_rate", 3e-5, "Peak learning rate.")
_BIAS_CORRECTION = flags.DEFINE_bool("adam_bias_correction", False,
                                     "Adam bias correction (the original BERT optimizer had none).")
_STEPS = flags.DEFINE_integer("num_train_steps", 1000, "Steps to train.")
_SAVE = flags.DEFINE_integer("save_checkpoints_steps", 100, "Checkpoint (and so refresh) interval.")
_KEEP = flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept.")
_LOG = flags.DEFINE_integer("log_every_steps", 10, "Progress line interval.")
_INIT_RETRIEVER = flags.DEFINE_string("init_retriever_checkpoint", None,
                                      "ICT / REALM / converted checkpoint (or its directory).")
_INIT_READER = flags.DEFINE_string("init_reader_checkpoint", None,
                                   "BERT checkpoint for the knowledge-augmented encoder (TF1 Google "
                                   "BERT, Hugging Face safetensors or Model Garden TF2).")
_BOOTSTRAP = flags.DEFINE_bool("bootstrap_index", False,
                               "Build the step-0 index in-process when none is published yet.")
_INDEX = flags.DEFINE_enum("index_implementation", "scann", ["scann", "brute_force"],
                           "MIPS implementation of a bootstrap index.")
_STALENESS = flags.DEFINE_integer("max_index_staleness_steps", None,
                                  "Wait for the refresher when the index is older than this many steps.")
_CHECK_EVERY = flags.DEFINE_integer("check_index_every_batches", 10, "Look for a newer index this often.")
_WAIT = flags.DEFINE_float("wait_for_index_seconds", None, "Give up waiting for an index after this.")
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
      share_embedders=_SHARE.value, query_seq_len=_Q.value, candidate_seq_len=_C.value,
      max_masks=_M.value, num_candidates=_N.value, retrieval_score_scale=_SCORE_SCALE.value)
  options = realm_trainer.RealmTrainerOptions(
      config=config,
      loop=loop.LoopOptions(model_dir=_MODEL_DIR.value, num_train_steps=_STEPS.value,
                            save_checkpoints_steps=_SAVE.value, keep_checkpoint_max=_KEEP.value,
                            log_every_steps=_LOG.value, jit_compile=_JIT.value),
      pretraining_corpus_path=_PRETRAINING.value, retrieval_corpus_path=_RETRIEVAL.value,
      batch_size=_BATCH.value, learning_rate=_LR.value, adam_bias_correction=_BIAS_CORRECTION.value,
      init_retriever_checkpoint=_INIT_RETRIEVER.value, init_reader_checkpoint=_INIT_READER.value,
      bootstrap_index=_BOOTSTRAP.value, index_implementation=_INDEX.value,
      max_index_staleness_steps=_STALENESS.value, check_index_every_batches=_CHECK_EVERY.value,
      wait_for_index_seconds=_WAIT.value, seed=_SEED.value)
  realm_trainer.train(options, strategy, log=logging.info)


if __name__ == "__main__":
  app.run(main)
