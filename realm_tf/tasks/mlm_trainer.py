"""BERT masked-LM pre-training and continued pre-training (bin/train_mlm): the reader's warm start.

REALM's knowledge-augmented encoder starts from pre-trained BERT, which already reads the second segment
of [CLS] a [SEP] b [SEP]; a reader trained from scratch first memorizes instead, and the retriever's
gradient through it is noise. Where no BERT exists for a language, domain or vocabulary (testdata's
285 wordpieces), this pre-trains one; where one exists without a masked-LM head (all-MiniLM-L6-v2), it
creates the head and adapts both to the corpus.

The run trains with the shared loop (checkpoints MODEL_DIR/ckpt-N, resume, strategies) and, at the end,
publishes MODEL_DIR/bert/ atomically: ckpt-N in Model Garden's layout (encoder, masked_lm), bert_config.json,
vocab.txt and eval.json (held-out masked-token accuracy and loss). `--init_reader_checkpoint=MODEL_DIR/bert`
(bin/train_realm), `--reader_checkpoint` (bin/train_orqa) and `--bert_config=MODEL_DIR/bert/bert_config.json`
take it as they take Google's BERT.
"""

import dataclasses
import json
import os
import shutil
import time
from typing import Callable, Dict, Optional

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import io_utils
from realm_tf import tokenization
from realm_tf.checkpoints import bert_mapping
from realm_tf.checkpoints import sources
from realm_tf.checkpoints import training_state
from realm_tf.data import corpus
from realm_tf.data import mlm as mlm_data
from realm_tf.data import text_records
from realm_tf.modeling import bert
from realm_tf.modeling import masked_lm as masked_lm_lib
from realm_tf.training import loop
from realm_tf.training import optimization
from realm_tf.training import task as task_lib

EXPORT_NAME = "bert"
EVAL_NAME = "eval.json"
_CONFIG_NAME = "bert_config.json"
_VOCAB_NAME = "vocab.txt"
_RUN_NAME = "mlm_run.json"


@dataclasses.dataclass(frozen=True)
class MlmTrainerOptions:
  """What bin/train_mlm's flags set (see there for meanings)."""
  bert_config: bert.BertConfig
  vocab_path: str
  input_path: str
  loop: loop.LoopOptions
  masking: mlm_data.MaskingOptions = mlm_data.MaskingOptions()
  do_lower_case: bool = True
  batch_size: int = 32
  learning_rate: float = 1e-4
  warmup_steps: Optional[int] = None
  adam_bias_correction: bool = False
  init_checkpoint: Optional[str] = None
  eval_percent: float = 5.0
  eval_batch_size: int = 64
  seed: int = 0


def build_model(config: bert.BertConfig) -> masked_lm_lib.MaskedLmPretrainer:
  return masked_lm_lib.MaskedLmPretrainer(config)


def warm_start(model: masked_lm_lib.MaskedLmPretrainer, checkpoint: str) -> str:
  """Loads BERT (and its masked-LM head where the source has one) from any format realm_tf reads.

  A source without a head (a sentence-embedding model such as all-MiniLM-L6-v2, or a Model Garden
  checkpoint of the encoder alone) leaves the head freshly initialized, to be trained here.
  """
  source = sources.open_source(checkpoint)
  encoder, head = model.encoder.encoder, model.encoder.masked_lm
  if isinstance(source, sources.TFCheckpointSource) and source.is_object_based:
    has_head = any(n.startswith("masked_lm/") for n in source.names())
    report = bert_mapping.restore_model_garden_checkpoint(encoder, source, head if has_head else None)
  else:
    report = bert_mapping.load_bert_weights(encoder, source, masked_lm=head, strict=False)
    encoder_unset = [n for n in report.unset if "/cls/" not in n and not n.startswith("cls/")]
    if encoder_unset:
      raise sources.ConversionError(
          f"{checkpoint}: the BERT encoder could not be loaded ({len(encoder_unset)} weights unset; does "
          f"--bert_config match the checkpoint?):\n" + report.summary())
    has_head = len(report.unset) == 0
  return (f"warm-started from {report.source_path}: {len(report.mapped)} variables" +
          ("" if has_head else "; the source has no masked-LM head, so the head starts untrained"))


def _documents(options: MlmTrainerOptions, tokenizer: tokenization.Tokenizer, log):
  documents = mlm_data.read_document_sentences(options.input_path, tokenizer)
  held_out = [d for d in documents if mlm_data.is_held_out(d, options.eval_percent)]
  train = [d for d in documents if not mlm_data.is_held_out(d, options.eval_percent)]
  if not train:
    raise text_records.InputError(f"{options.input_path}: all {len(documents)} documents are held out; "
                                  "lower --eval_percent")
  log(f"{len(documents)} documents from {options.input_path}: {len(train)} for training, {len(held_out)} "
      f"held out ({options.eval_percent}%) for masked-token accuracy")
  return train, held_out


def evaluate(model: masked_lm_lib.MaskedLmPretrainer, examples: Dict[str, np.ndarray],
             batch_size: int) -> Dict[str, float]:
  """Masked-token accuracy and mean loss over a fixed set of examples."""
  total_loss = total_correct = total_count = 0.0
  num = len(examples[mlm_data.TOKEN_IDS])
  compute = tf.function(lambda batch: model.compute_loss(batch, training=False), autograph=False)
  for start in range(0, num, batch_size):
    batch = {k: tf.constant(v[start:start + batch_size]) for k, v in examples.items()}
    output = compute(batch)
    correct, count = output.metrics["masked_lm_accuracy"]
    total_loss += float(output.loss_sum)
    total_correct += float(correct)
    total_count += float(count)
  return {
      "masked_lm_accuracy": total_correct / max(total_count, 1.0),
      "masked_lm_loss": total_loss / max(total_count, 1.0),
      "num_examples": num,
      "num_predictions": int(total_count)
  }


def _check_run(options: MlmTrainerOptions, model_dir: str) -> None:
  """A resumed run must keep what decides the example stream and the model's shape."""
  run = {
      "bert_config": options.bert_config.to_dict(),
      "masking": dataclasses.asdict(options.masking),
      "input_path": os.path.abspath(options.input_path),
      "seed": options.seed,
      "vocab_sha256": corpus.vocab_sha256(options.vocab_path)
  }
  path = os.path.join(model_dir, _RUN_NAME)
  if tf.io.gfile.exists(path):
    with tf.io.gfile.GFile(path) as f:
      saved = json.load(f)
    differences = [
        f"{k}: {saved.get(k)!r} (saved) vs {v!r} (flags)" for k, v in run.items() if saved.get(k) != v
    ]
    if differences:
      raise ValueError(f"{path}: --model_dir was trained with other settings; use a new --model_dir or "
                       "the same flags. Differences: " + "; ".join(differences))
  else:
    io_utils.write_json_atomic(path, run)


def export_reader(model: masked_lm_lib.MaskedLmPretrainer, options: MlmTrainerOptions, step: int,
                  metrics: Dict[str, float]) -> str:
  """Publishes MODEL_DIR/bert/ (Model Garden checkpoint, config, vocab, eval) by one rename."""
  model_dir = options.loop.model_dir
  final = os.path.join(model_dir, EXPORT_NAME)
  tmp = io_utils.temporary_path(final)
  tf.io.gfile.makedirs(tmp)
  tf.train.Checkpoint(**model.reader_items()).write(os.path.join(tmp, f"ckpt-{step}"))
  training_state.write_checkpoint_state(tmp, f"ckpt-{step}")
  io_utils.write_json_atomic(os.path.join(tmp, _CONFIG_NAME), options.bert_config.to_dict())
  tf.io.gfile.copy(options.vocab_path, os.path.join(tmp, _VOCAB_NAME), overwrite=True)
  io_utils.write_json_atomic(os.path.join(tmp, EVAL_NAME), dict(metrics, step=step))
  old = final + ".old"
  if tf.io.gfile.exists(old):
    shutil.rmtree(old)
  if tf.io.gfile.exists(final):
    os.rename(final, old)
  os.rename(tmp, final)
  io_utils.fsync_path(model_dir)
  if tf.io.gfile.exists(old):
    shutil.rmtree(old)
  return final


@task_lib.register("mlm")
class MlmTask(task_lib.Task):
  """Masked-LM training of BERT on the training documents; the model and optimizer it builds stay in
  self.model and self.optimizer, from which train() evaluates and exports (self.started: when the model
  was built)."""

  def __init__(self,
               options: MlmTrainerOptions,
               tokenizer: tokenization.Tokenizer,
               documents,
               log: Callable[[str], None] = print):
    self.options = options
    self.tokenizer = tokenizer
    self.documents = documents
    self.log = log
    self.model: Optional[masked_lm_lib.MaskedLmPretrainer] = None
    self.optimizer = None
    self.started = time.time()

  def build_model(self) -> masked_lm_lib.MaskedLmPretrainer:
    # --seed covers the weights' initialization and dropout too, not only the data order: two runs of one
    # seed then start from the same BERT.
    tf_keras.utils.set_random_seed(self.options.seed)
    self.model = build_model(self.options.bert_config)
    # The run's clock (eval.json's seconds) starts once the model is built.
    self.started = time.time()
    return self.model

  def create_optimizer(self):
    options = self.options
    self.optimizer = optimization.create_optimizer(options.learning_rate,
                                                   options.loop.num_train_steps,
                                                   num_warmup_steps=options.warmup_steps,
                                                   bias_correction=options.adam_bias_correction)
    return self.optimizer

  def build_inputs(self, batches_done: int) -> tf.data.Dataset:
    options = self.options
    return mlm_data.mlm_dataset(self.documents,
                                self.tokenizer,
                                options.masking,
                                options.batch_size,
                                seed=options.seed,
                                skip_examples=batches_done * options.batch_size)

  def initialize(self, model: masked_lm_lib.MaskedLmPretrainer) -> None:
    if self.options.init_checkpoint:
      self.log(warm_start(model, self.options.init_checkpoint))


def train(options: MlmTrainerOptions,
          strategy: tf.distribute.Strategy,
          log: Callable[[str], None] = print) -> Dict[str, float]:
  """Pre-trains to options.loop.num_train_steps, evaluates the held-out documents and exports."""
  model_dir = options.loop.model_dir
  tf.io.gfile.makedirs(model_dir)
  tokenizer = tokenization.Tokenizer(options.vocab_path, options.do_lower_case)
  if tokenizer.vocab_size != options.bert_config.vocab_size:
    raise ValueError(f"--vocab_path={options.vocab_path} has {tokenizer.vocab_size} tokens but the BERT "
                     f"config has vocab_size {options.bert_config.vocab_size}; use the model's vocab")
  if options.masking.max_seq_len > options.bert_config.max_position_embeddings:
    raise ValueError(f"--max_seq_len={options.masking.max_seq_len} exceeds the BERT's "
                     f"max_position_embeddings {options.bert_config.max_position_embeddings}")
  _check_run(options, model_dir)
  train_docs, held_out = _documents(options, tokenizer, log)
  # 0 steps evaluates --init_checkpoint as it is (the held-out accuracy of a given BERT, as the test of
  # the demo's shipped reader measures it) and exports it.
  evaluate_only = options.loop.num_train_steps == 0
  if evaluate_only and not options.init_checkpoint:
    raise ValueError("--num_train_steps=0 evaluates and exports --init_checkpoint without training; "
                     "give --init_checkpoint, or a positive --num_train_steps")
  task = MlmTask(options, tokenizer, train_docs, log)
  if evaluate_only:
    with strategy.scope():
      model = task.build_model()
    task.initialize(model)
    step = 0
  else:
    loop.train(task, options.loop, strategy, log=log)
    model = task.model
    step = int(task.optimizer.iterations.numpy())
  if held_out:
    metrics = evaluate(model, mlm_data.eval_examples(held_out, tokenizer, options.masking, options.seed),
                       options.eval_batch_size)
    log(f"held-out masked-token accuracy {metrics['masked_lm_accuracy']:.4f} (loss "
        f"{metrics['masked_lm_loss']:.4f}) over {metrics['num_predictions']} predictions in "
        f"{len(held_out)} documents")
  else:
    metrics = {}
    log("no held-out documents (--eval_percent=0): no masked-token accuracy")
  path = export_reader(model, options, step, dict(metrics, seconds=time.time() - task.started))
  log(f"reader warm start written to {path} (pass it as --init_reader_checkpoint)")
  return metrics
