"""bin/refresh_doc_embeds' configuration tree: the index refresher (realm_tf.retrieval.refresher).

  model_dir
  data       retrieval_corpus_path
  index      index_implementation index_rescoring keep batch_size embed_length_buckets embed_jit_compile
  watch      max_refreshes poll_seconds start_at_step wait_for_lock
  bootstrap  once init_checkpoint config_path
  workers    num_workers worker_index merge_timeout_seconds
  device     strategy tpu num_cpu_devices mixed_precision

A refresher shares its model dir with the trainer; it writes MODEL_DIR/refresh_doc_embeds.yaml (worker i
of several: refresh_doc_embeds.worker<i>.yaml).
"""

import dataclasses
from typing import Callable, ClassVar, Optional

from realm_tf.config import sections
from realm_tf.config.run_config import option
from realm_tf.config.run_config import section
from realm_tf.retrieval import refresh_precision
from realm_tf.retrieval import refresher


@dataclasses.dataclass(frozen=True)
class RefreshData:
  """The corpus the indexes embed."""
  retrieval_corpus_path: Optional[str] = option(None,
                                                sections.RETRIEVAL_CORPUS_HELP,
                                                required=True,
                                                daily=True)


@dataclasses.dataclass(frozen=True)
class RefreshIndex:
  """The index each refresh builds and how the corpus is embedded."""
  index_implementation: str = option("scann",
                                     "MIPS implementation of the published index.",
                                     choices=("scann", "brute_force"))
  index_rescoring: str = option(
      "float32", "Vectors the ScaNN index re-scores its candidates with: float32, or int8 (a compressed "
      "index: 132 instead of 512 bytes per document at D=128, recall@10 in docs/results.md).",
      choices=("float32", "int8"))
  keep: int = option(3, "Published indexes to keep.", lower_bound=1)
  batch_size: int = option(128, "Documents per embedding batch (global).", lower_bound=1)
  embed_length_buckets: Optional[int] = option(
      None, "Padded lengths the documents are grouped into (up to candidate_seq_len, multiples of 8); 1 "
      "pads every document to candidate_seq_len. Default: 4 with --embed_jit_compile (XLA compiles one "
      "program per length), one every 8 wordpieces without.",
      lower_bound=1)
  embed_jit_compile: Optional[bool] = option(
      None, "Compile the embedding step with XLA (needed on TPUs). Default: chosen with the precision "
      "by the device (realm_tf/retrieval/refresh_precision.py): on CPUs, bfloat16 runs faster "
      "without it and float32 with it (bench/refresh_bench.py).")


@dataclasses.dataclass(frozen=True)
class RefreshWatch:
  """How the refresher waits for the trainer's checkpoints and for another refresher."""
  max_refreshes: Optional[int] = option(None, "Exit after this many refreshes.", lower_bound=1)
  poll_seconds: float = option(5.0, "Seconds between looks for a checkpoint.", lower_bound=0.0)
  start_at_step: int = option(0, "Ignore checkpoints before this step.", lower_bound=0)
  wait_for_lock: bool = option(
      False, "When another refresher runs on --model_dir (it holds MODEL_DIR/.refresher.lock), wait for it "
      "to exit instead of stopping with an error naming it.")


@dataclasses.dataclass(frozen=True)
class RefreshBootstrap:
  """--once: the index of step 0 from a warm-start checkpoint, before the trainer starts."""
  once: bool = option(False, "Publish one index from --init_checkpoint (step 0) and exit.")
  init_checkpoint: Optional[str] = option(None, "With --once: warm-start checkpoint of the retriever.")
  config_path: Optional[str] = option(
      None, "With --once: realm_config.json to build the retriever from (default: the one in --model_dir).")


@dataclasses.dataclass(frozen=True)
class RefreshWorkers:
  """Several hosts embedding contiguous parts of the corpus; worker 0 merges and publishes."""
  num_workers: int = option(1, "Hosts sharing the corpus embedding.", lower_bound=1)
  worker_index: int = option(0, "This host's index in [0, num_workers).", lower_bound=0)
  merge_timeout_seconds: float = option(
      1800.0, "Worker 0 gives up a step whose other workers' rows do not arrive within this time (they may "
      "have moved on to a newer checkpoint).",
      lower_bound=0.0)


@dataclasses.dataclass(frozen=True)
class RefreshDevice(sections.Device):
  mixed_precision: str = option(
      refresh_precision.AUTO, "Precision of the document tower while embedding (and of the query tower "
      "published with the index): mixed_bfloat16 computes in bfloat16 with float32 weights. auto: "
      "mixed_bfloat16 on TPUs, on GPUs from compute capability 8.0, on CPUs with AMX and on AMD CPUs "
      "with avx512_bf16, float32 elsewhere, where bfloat16 measured slower; the refresher logs its "
      "choice (realm_tf/retrieval/refresh_precision.py; bench/refresh_bench.py: same recall). The "
      "index stores float32.",
      choices=(refresh_precision.AUTO, "float32", "mixed_bfloat16"),
      daily=True)


@dataclasses.dataclass(frozen=True)
class RefreshDocEmbedsConfig:
  """bin/refresh_doc_embeds: keeps a REALM run's index fresh."""
  BINARY: ClassVar[str] = "refresh_doc_embeds"

  model_dir: Optional[str] = option(None, "The trainer's model directory.", required=True, daily=True)
  data: RefreshData = section(RefreshData)
  index: RefreshIndex = section(RefreshIndex)
  watch: RefreshWatch = section(RefreshWatch)
  bootstrap: RefreshBootstrap = section(RefreshBootstrap)
  workers: RefreshWorkers = section(RefreshWorkers)
  device: RefreshDevice = section(RefreshDevice)

  @property
  def file_stem(self) -> str:
    """The name its file is written under: one file per worker when several share the model dir."""
    workers = self.workers
    return self.BINARY if workers.num_workers == 1 else f"{self.BINARY}.worker{workers.worker_index}"

  def with_precision_chosen(self, log: Callable[[str], None]) -> "RefreshDocEmbedsConfig":
    """The tree with --mixed_precision=auto and an unset --embed_jit_compile resolved for this machine
    (refresh_precision.choose); the file written to the model dir keeps what the user asked for, so that
    a restart on another machine chooses again."""
    device, index = self.device, self.index
    gpus = () if device.strategy == "tpu" else refresh_precision.gpu_compute_capabilities()
    choice = refresh_precision.choose(device.strategy, device.mixed_precision, index.embed_jit_compile,
                                      refresh_precision.cpu_info(), gpus)
    log(f"embedding precision: {choice.reason}")
    return dataclasses.replace(self,
                               device=dataclasses.replace(device, mixed_precision=choice.mixed_precision),
                               index=dataclasses.replace(index, embed_jit_compile=choice.jit_compile))

  def refresher_options(self) -> refresher.RefresherOptions:
    """What refresher.run and refresher.bootstrap take (from the tree with_precision_chosen returns)."""
    if self.index.embed_jit_compile is None:
      raise ValueError("embed_jit_compile is not chosen yet: call with_precision_chosen() first")
    return refresher.RefresherOptions(model_dir=self.model_dir,
                                      corpus_prefix=self.data.retrieval_corpus_path,
                                      **dataclasses.asdict(self.index),
                                      **dataclasses.asdict(self.watch),
                                      **dataclasses.asdict(self.workers))
