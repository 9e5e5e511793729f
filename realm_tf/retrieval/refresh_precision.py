"""The refresher's precision and XLA when they are left to it: the fastest path that keeps recall.

bench/refresh_bench.py embedded the 2,067 SQuAD dev paragraphs with MiniLM's weights every way the
refresher can (docs/results.md, "Refresh"): on CPUs with bfloat16 instructions (AMD EPYC and Intel Xeon
of this fleet, both with avx512_bf16) mixed_bfloat16 without XLA was the fastest (1.68x and 1.67x
sentence-transformers; 1.4x and 1.0x the float32 default's docs/s, 1.75x per CPU second on the Xeon)
with recall@1/5/20/100 within 0.1 point of float32. Without bfloat16 instructions oneDNN emulates
bfloat16 and it is slower than float32, so float32 with XLA (4 length buckets) stays. TPUs compute in
bfloat16 natively and need XLA; GPUs from Ampere (compute capability 8.0) on have bfloat16 units.

The rule reads what the machine has instead of timing a refresh at start: a timing on a loaded 2-core
host is noise, and the choice must repeat when the refresher restarts. Forcing either setting
(--mixed_precision, --[no]embed_jit_compile) overrides its half of the rule.
"""

import dataclasses
import os
from typing import Optional, Sequence

AUTO = "auto"
# x86 CPU flags (Linux /proc/cpuinfo) of instructions that compute in bfloat16.
_BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclasses.dataclass(frozen=True)
class Choice:
  mixed_precision: str
  jit_compile: bool
  reason: str


def cpu_flags(cpuinfo_path: str = "/proc/cpuinfo") -> Optional[Sequence[str]]:
  """The first CPU's feature flags, or None where the file does not exist (not Linux) or has none
  (ARM hosts list "Features")."""
  if not os.path.exists(cpuinfo_path):
    return None
  with open(cpuinfo_path, errors="replace") as f:
    for line in f:
      key, _, value = line.partition(":")
      if key.strip() in ("flags", "Features"):
        return value.split()
  return None


def choose(strategy: str, mixed_precision: str, jit_compile: Optional[bool],
           flags: Optional[Sequence[str]] = None,
           gpu_compute_capabilities: Sequence[tuple] = ()) -> Choice:
  """The precision policy and XLA setting the refresher embeds with.

  Args:
    strategy: the run's --strategy (realm_tf.training.distribute.STRATEGIES).
    mixed_precision: "auto", or the policy the user forced.
    jit_compile: None (auto), or the setting the user forced.
    flags: the CPU's feature flags (cpu_flags()); None: unknown, taken as no bfloat16 instructions.
    gpu_compute_capabilities: (major, minor) of each visible GPU; empty on CPU hosts.
  """
  if strategy == "tpu":
    device, bf16_units = "a TPU (bfloat16 natively; XLA needed)", True
  elif gpu_compute_capabilities:
    bf16_units = all(cc[0] >= 8 for cc in gpu_compute_capabilities)
    device = f"GPUs of compute capability {sorted(set(gpu_compute_capabilities))}"
  else:
    found = [f for f in _BFLOAT16_CPU_FLAGS if f in (flags or ())]
    bf16_units = bool(found)
    device = (f"a CPU with bfloat16 instructions ({', '.join(found)})" if found else
              "a CPU without bfloat16 instructions (no avx512_bf16 or amx_bf16"
              f"{'' if flags is not None else ': its flags could not be read'})")
  precision = mixed_precision if mixed_precision != AUTO else (
      "mixed_bfloat16" if bf16_units else "float32")
  # Accelerators run XLA; on CPUs XLA helps float32 and slows bfloat16 (oneDNN's bfloat16 kernels
  # run outside XLA), so the XLA half follows the precision actually used.
  on_cpu = strategy != "tpu" and not gpu_compute_capabilities
  jit = jit_compile if jit_compile is not None else (not on_cpu or precision == "float32")
  forced = [f"--mixed_precision={mixed_precision}"] if mixed_precision != AUTO else []
  if jit_compile is not None:
    forced.append(f"--{'' if jit_compile else 'no'}embed_jit_compile")
  reason = f"{device}: {precision}, {'with' if jit else 'without'} XLA"
  if forced:
    reason += f" (forced: {' '.join(forced)})"
  return Choice(precision, jit, reason)


def gpu_compute_capabilities() -> Sequence[tuple]:
  """(major, minor) of each GPU TensorFlow sees (imported here: the rule itself needs no TensorFlow)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  found = []
  for gpu in tf.config.list_physical_devices("GPU"):
    capability = tf.config.experimental.get_device_details(gpu).get("compute_capability")
    if capability:
      found.append(tuple(capability))
  return found
