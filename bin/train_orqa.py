r"""ORQA fine-tuning: open-domain QA on a frozen index with a trainable query tower and span reader.

The corpus is embedded ONCE at the start with the document tower of --retriever_checkpoint (or taken from
--index_dir, a published REALM index of the same corpus) and frozen; every --eval_every_steps the model
is evaluated on --dev_path and the best checkpoint by dev accuracy is kept in MODEL_DIR/best/:
  python bin/train_orqa.py --model_dir=/runs/orqa_nq --vocab_path=vocab.txt --bert_config=bert_base \
      --retriever_checkpoint=/runs/realm --retrieval_corpus_path=/data/corpus/blocks \
      --reader_checkpoint=/bert/bert_model.ckpt --train_path=NQ-open.train.jsonl \
      --dev_path=NQ-open.dev.jsonl --batch_size=8 --num_train_steps=100000 --strategy=tpu --tpu=my-tpu
"""

from absl import app
from absl import flags
from absl import logging

from realm_tf.modeling import orqa as orqa_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.training import orqa_trainer
from realm_tf.training import trainer_flags

_FLAGS = trainer_flags.define_trainer_flags(batch_size=8, learning_rate=1e-5, num_train_steps=1000,
                                            save_checkpoints_steps=500)
_QA = trainer_flags.define_qa_data_flags(
    dev_help="Dev QA file for periodic evaluation and best-checkpoint selection.", dev_required=False)
_RETRIEVER_FLAGS = trainer_flags.define_retriever_flags(query_seq_len=64, candidate_seq_len=288)
_INDEX_DIR = flags.DEFINE_string("index_dir", None, "A published index (MODEL_DIR/index/<step> of a REALM "
                                 "run) over --retrieval_corpus_path, instead of embedding the corpus.")
_RETRIEVER = trainer_flags.define_retriever_checkpoint_flag(
    "REALM / ICT / ORQA / converted checkpoint (or its directory).")
_READER = flags.DEFINE_string("reader_checkpoint", None,
                              "BERT warm start of the reader (TF1 Google BERT, Hugging Face safetensors or "
                              "Model Garden TF2).")
_DROPOUT = flags.DEFINE_float("embedder_dropout_rate", 0.0, "Query tower dropout in training (ICT: 0.1).")
_L = flags.DEFINE_integer("reader_seq_len", 320, "Reader length L.")
_SPAN_HIDDEN = flags.DEFINE_integer("span_hidden_size", 256, "Span head width.")
_SPAN_WIDTH = flags.DEFINE_integer("max_span_width", 10, "Longest answer span in wordpieces.")
_RETRIEVER_BEAM = flags.DEFINE_integer("retriever_beam_size", 5000, "Blocks of the retriever loss.")
_READER_BEAM = flags.DEFINE_integer("reader_beam_size", 5, "Blocks the reader reads.")
_MAX_ANSWERS = flags.DEFINE_integer("max_answers", 10, "Gold spans kept per block.")
_MAX_NUM_ANSWERS = flags.DEFINE_integer("max_num_answers", 10, "Answers per question used in training.")
_MAX_ANSWER_LEN = flags.DEFINE_integer("max_answer_len", 16, "Wordpieces per answer matched in training.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every_steps", 500, "Dev evaluation interval (and at the end).")
_EVAL_BATCH = flags.DEFINE_integer("eval_batch_size", 32, "Dev prediction batch size.")
_EMBED_BATCH = trainer_flags.define_embed_batch_size_flag()
_SKIP_INVALID = trainer_flags.define_skip_invalid_flag()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  strategy, bert = _FLAGS.setup()
  config = realm_config_lib.RealmConfig(
      retriever_bert=bert, reader_bert=bert, vocab_path=_FLAGS.vocab_path.value,
      do_lower_case=_FLAGS.do_lower_case.value,
      projection_size=_RETRIEVER_FLAGS.projection_size.value,
      embedder_layer_norm_epsilon=_RETRIEVER_FLAGS.embedder_layer_norm_epsilon.value,
      embedder_dropout_rate=_DROPOUT.value, share_embedders=False,
      query_seq_len=_RETRIEVER_FLAGS.query_seq_len.value,
      candidate_seq_len=_RETRIEVER_FLAGS.candidate_seq_len.value,
      embedder_pooling=_FLAGS.embedder_pooling.value, cosine_score_scale=_FLAGS.cosine_score_scale.value)
  orqa = orqa_lib.OrqaConfig(
      reader_seq_len=_L.value, span_hidden_size=_SPAN_HIDDEN.value, max_span_width=_SPAN_WIDTH.value,
      retriever_beam_size=_RETRIEVER_BEAM.value, reader_beam_size=_READER_BEAM.value,
      max_answers=_MAX_ANSWERS.value, max_num_answers=_MAX_NUM_ANSWERS.value,
      max_answer_len=_MAX_ANSWER_LEN.value,
      retrieval_corpus_path=_RETRIEVER_FLAGS.retrieval_corpus_path.value)
  options = orqa_trainer.OrqaTrainerOptions(
      config=config, orqa=orqa,
      loop=_FLAGS.loop_options(),
      train_path=_QA.train_path.value, dev_path=_QA.dev_path.value, retriever_checkpoint=_RETRIEVER.value,
      index_dir=_INDEX_DIR.value, reader_checkpoint=_READER.value, batch_size=_FLAGS.batch_size.value,
      learning_rate=_FLAGS.learning_rate.value,
      adam_bias_correction=_FLAGS.adam_bias_correction.value,
      eval_every_steps=_EVAL_EVERY.value, eval_batch_size=_EVAL_BATCH.value,
      max_eval_examples=_QA.max_eval_examples.value, embed_batch_size=_EMBED_BATCH.value,
      skip_invalid=_SKIP_INVALID.value, seed=_FLAGS.seed.value)
  summary = orqa_trainer.train(options, strategy, log=logging.info)
  best = summary.get("best")
  if best:
    logging.info("best dev %s %.2f at step %d: %s", best["metric"], best["value"], best["step"],
                 best["checkpoint"])


if __name__ == "__main__":
  app.run(main)
