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
from realm_tf.training import realm_trainer
from realm_tf.training import trainer_flags

_FLAGS = trainer_flags.define_trainer_flags(batch_size=16, learning_rate=3e-5, num_train_steps=1000,
                                            save_checkpoints_steps=100)
_PRETRAINING = trainer_flags.define_pretraining_corpus_flag()
_RETRIEVER_FLAGS = trainer_flags.define_retriever_flags(query_seq_len=96, candidate_seq_len=288)
_SHARE = flags.DEFINE_bool("share_embedders", True, "One tower for queries and documents.")
_M = flags.DEFINE_integer("max_masks", 10, "M.")
_N = flags.DEFINE_integer("num_candidates", 8, "N, including the null document.")
_INIT_RETRIEVER = flags.DEFINE_string("init_retriever_checkpoint", None,
                                      "ICT / REALM / converted checkpoint (or its directory).")
_INIT_READER = flags.DEFINE_string("init_reader_checkpoint", None,
                                   "BERT checkpoint for the knowledge-augmented encoder (TF1 Google "
                                   "BERT, Hugging Face safetensors or Model Garden TF2).")
_BOOTSTRAP = flags.DEFINE_bool("bootstrap_index", False,
                               "Build the step-0 index in-process when none is published yet.")
_INDEX = trainer_flags.define_index_implementation_flag("MIPS implementation of a bootstrap index.")
_STALENESS = flags.DEFINE_integer(
    "max_index_staleness_steps", None,
    "Wait for the refresher when the index is older than this many steps. The trainer reports its step "
    "once per --steps_per_loop and batches are prepared a few ahead, so a batch may train on an index up "
    "to this + --steps_per_loop + the prefetched batches older.")
_CHECK_EVERY = flags.DEFINE_integer("check_index_every_batches", 10, "Look for a newer index this often.")
_SWAP = flags.DEFINE_integer(
    "index_swap_steps", None,
    "Fixed index swaps instead of the newest index: step s trains on the index of the checkpoint of step "
    "K * floor((s - 1) / K) for K this flag, waiting for it, so two runs of one seed train on the same "
    "indexes. A multiple of --save_checkpoints_steps; replaces --max_index_staleness_steps and "
    "--check_index_every_batches.")
_WAIT = flags.DEFINE_float("wait_for_index_seconds", None, "Give up waiting for an index after this.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  strategy, bert = _FLAGS.setup()
  config = realm_config_lib.RealmConfig(
      retriever_bert=bert, reader_bert=bert, vocab_path=_FLAGS.vocab_path.value,
      do_lower_case=_FLAGS.do_lower_case.value, projection_size=_RETRIEVER_FLAGS.projection_size.value,
      embedder_layer_norm_epsilon=_RETRIEVER_FLAGS.embedder_layer_norm_epsilon.value,
      share_embedders=_SHARE.value, query_seq_len=_RETRIEVER_FLAGS.query_seq_len.value,
      candidate_seq_len=_RETRIEVER_FLAGS.candidate_seq_len.value, max_masks=_M.value,
      num_candidates=_N.value, embedder_pooling=_FLAGS.embedder_pooling.value,
      cosine_score_scale=_FLAGS.cosine_score_scale.value)
  options = realm_trainer.RealmTrainerOptions(
      config=config, loop=_FLAGS.loop_options(),
      pretraining_corpus_path=_PRETRAINING.value,
      retrieval_corpus_path=_RETRIEVER_FLAGS.retrieval_corpus_path.value,
      batch_size=_FLAGS.batch_size.value, learning_rate=_FLAGS.learning_rate.value,
      adam_bias_correction=_FLAGS.adam_bias_correction.value,
      init_retriever_checkpoint=_INIT_RETRIEVER.value, init_reader_checkpoint=_INIT_READER.value,
      bootstrap_index=_BOOTSTRAP.value, index_implementation=_INDEX.value,
      max_index_staleness_steps=_STALENESS.value, check_index_every_batches=_CHECK_EVERY.value,
      wait_for_index_seconds=_WAIT.value, index_swap_steps=_SWAP.value, seed=_FLAGS.seed.value)
  realm_trainer.train(options, strategy, log=logging.info)


if __name__ == "__main__":
  app.run(main)
