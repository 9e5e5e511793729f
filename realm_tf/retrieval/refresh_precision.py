"""The refresher's precision and XLA when they are left to it: the fastest path that keeps recall.

bench/refresh_bench.py embedded the 2,067 SQuAD dev paragraphs with MiniLM's weights every way the
refresher can (docs/results.md, "Refresh"), with the same recall@1/5/20/100 in bfloat16 as in float32
(within 0.1 point), on three CPUs of this fleet:
  Intel Xeon, AMX bf16 units (as docs      mixed_bfloat16 without XLA 1.75x float32+XLA per CPU second
  recorded; bench/results/refresh_bench.json)
  AMD EPYC with avx512_bf16, no AMX        mixed_bfloat16 without XLA 1.9x float32+XLA's docs/s
  Intel Xeon (model 207) whose VM exposes  mixed_bfloat16 without XLA 0.7x float32+XLA per CPU second
  avx512_bf16 but not AMX                  (bench/results/refresh_bench_avx512bf16_rule.json and
                                           refresh_bench_default.json)
So bfloat16 instructions alone do not decide it: oneDNN's bfloat16 kernels pay on AMX and on AMD's
avx512_bf16, and lose to XLA's float32 on Intel's avx512_bf16 alone. The rule follows the measurements:
bfloat16 without XLA on CPUs with AMX and on AMD CPUs with avx512_bf16, float32 with XLA elsewhere (an
unmeasured CPU keeps the float32 path it had before). TPUs compute in bfloat16 natively and need XLA;
GPUs from Ampere (compute capability 8.0) on have bfloat16 units.

The rule reads what the machine has instead of timing a refresh at start: a timing on a loaded 2-core
host is noise, and the choice must repeat when the refresher restarts. Forcing either setting
(--mixed_precision, --[no]embed_jit_compile) overrides its half of the rule.
"""

import dataclasses
import os
from typing import Optional, Sequence

AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class Choice:
  mixed_precision: str
  jit_compile: bool
  reason: str


@dataclasses.dataclass(frozen=True)
class CpuInfo:
  vendor: str  # "GenuineIntel", "AuthenticAMD", ... ("" where not listed)
  flags: Sequence[str]


def cpu_info(cpuinfo_path: str = "/proc/cpuinfo") -> Optional[CpuInfo]:
  """The first CPU's vendor and feature flags, or None where the file does not exist (not Linux) or lists
  no flags (ARM hosts list "Features")."""
  if not os.path.exists(cpuinfo_path):
    return None
  vendor = ""
  with open(cpuinfo_path, errors="replace") as f:
    for line in f:
      key, _, value = line.partition(":")
      key = key.strip()
      if key == "vendor_id":
        vendor = value.strip()
      elif key in ("flags", "Features"):
        return CpuInfo(vendor, value.split())
  return None


def _cpu_has_fast_bfloat16(cpu: Optional[CpuInfo]):
  """(whether oneDNN's bfloat16 beats XLA's float32 on this CPU, the words that say why)."""
  if cpu is None:
    return False, "a CPU whose flags could not be read"
  if "amx_bf16" in cpu.flags:
    return True, "a CPU with AMX (amx_bf16)"
  if "avx512_bf16" in cpu.flags:
    if cpu.vendor == "AuthenticAMD":
      return True, "an AMD CPU with avx512_bf16"
    return False, f"a {cpu.vendor or 'non-AMD'} CPU with avx512_bf16 but no AMX"
  return False, "a CPU without bfloat16 instructions"


def choose(strategy: str,
           mixed_precision: str,
           jit_compile: Optional[bool],
           cpu: Optional[CpuInfo] = None,
           gpu_compute_capabilities: Sequence[tuple] = ()) -> Choice:
  """The precision policy and XLA setting the refresher embeds with.

  Args:
    strategy: the run's --strategy (realm_tf.training.distribute.STRATEGIES).
    mixed_precision: "auto", or the policy the user forced.
    jit_compile: None (auto), or the setting the user forced.
    cpu: the CPU's vendor and flags (cpu_info()); None: unknown, taken as the float32 path.
    gpu_compute_capabilities: (major, minor) of each visible GPU; empty on CPU hosts.
  """
  if strategy == "tpu":
    device, fast_bf16 = "a TPU (bfloat16 natively; XLA needed)", True
  elif gpu_compute_capabilities:
    fast_bf16 = all(cc[0] >= 8 for cc in gpu_compute_capabilities)
    device = f"GPUs of compute capability {sorted(set(gpu_compute_capabilities))}"
  else:
    fast_bf16, device = _cpu_has_fast_bfloat16(cpu)
  precision = mixed_precision if mixed_precision != AUTO else ("mixed_bfloat16" if fast_bf16 else "float32")
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
