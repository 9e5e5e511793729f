"""Warm-starting the FiD reader's BERT encoder (FidConfig.encoder = "bert") from a pre-trained BERT.

The reader (realm_tf.modeling.fid_reader) only builds a BertEncoderV2 of a given config; reading that
config and the weights from a file is this package's job, like every other weight read: anything
bert_mapping reads (a bin/train_mlm export, TF1 BERT, Hugging Face safetensors such as all-MiniLM-L6-v2).
bin/train_fid_kd and realm_tf.tasks.fid_kd call it.
"""

from realm_tf.checkpoints import bert_mapping
from realm_tf.checkpoints import sources
from realm_tf.modeling import bert as bert_lib
from realm_tf.modeling import fid_reader


def bert_encoder_config(checkpoint: str,
                        vocab_size: int,
                        flag: str = "--reader_init_checkpoint") -> bert_lib.BertConfig:
  """The BertConfig of a warm-start checkpoint (sources.config_from_source), checked against the
  corpus vocab: the reader's ids come from that vocab, and a BERT of another vocab would read them as
  other words."""
  try:
    config = sources.config_from_source(checkpoint)
  except (sources.ConversionError, FileNotFoundError, ValueError) as e:
    raise ValueError(f"{flag}={checkpoint}: not a BERT checkpoint realm_tf can read ({e}); pass a "
                     "bin/train_mlm export, a TF1 BERT checkpoint or a Hugging Face BERT directory with "
                     "its bert_config.json / config.json") from e
  if config.vocab_size != vocab_size:
    raise ValueError(f"{flag}={checkpoint}: its BERT has a vocabulary of {config.vocab_size} wordpieces, "
                     f"the corpus vocab (--vocab_path) {vocab_size}; warm-start from a BERT of the same "
                     "vocab (e.g. bin/train_mlm with this --vocab_path)")
  return config


def load_encoder_weights(reader: fid_reader.FidReader, checkpoint: str) -> bert_mapping.ConversionReport:
  """Warm-starts a BERT-encoder reader's encoder from `checkpoint`; strict: every encoder weight must be
  found (a partly random encoder is not the pre-trained reader the run asks for)."""
  if reader.config.encoder != "bert":
    raise ValueError(f"load_encoder_weights: the reader's encoder is {reader.config.encoder!r}, not 'bert'")
  return bert_mapping.load_bert_weights(reader.bert_encoder, checkpoint, strict=True)
