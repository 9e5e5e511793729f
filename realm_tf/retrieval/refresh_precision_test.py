"""The refresher's precision rule (refresh_precision.choose) on the machines it was measured on, and the
CPU description it reads."""

import os
import tempfile

from absl.testing import absltest

from realm_tf.retrieval import refresh_precision

CpuInfo = refresh_precision.CpuInfo
_AVX512_BF16 = "fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni".split()
# The three CPUs bench/refresh_bench.py measured, and one without bfloat16 instructions.
_XEON_AMX = CpuInfo("GenuineIntel", _AVX512_BF16 + ["amx_tile", "amx_bf16"])
_EPYC = CpuInfo("AuthenticAMD", _AVX512_BF16)
_XEON_NO_AMX = CpuInfo("GenuineIntel", _AVX512_BF16 + ["avx512_fp16"])
_OLD_CPU = CpuInfo("GenuineIntel", "fpu sse2 avx2 fma".split())


class ChooseTest(absltest.TestCase):

  def test_cpus_where_bfloat16_measured_faster_embed_in_it_without_xla(self):
    for cpu, why in ((_XEON_AMX, "AMX"), (_EPYC, "AMD CPU with avx512_bf16")):
      choice = refresh_precision.choose("cpu", "auto", None, cpu)
      self.assertEqual((choice.mixed_precision, choice.jit_compile), ("mixed_bfloat16", False), why)
      self.assertIn(why, choice.reason)

  def test_cpus_where_it_measured_slower_or_was_not_measured_keep_float32_with_xla(self):
    for cpu in (_XEON_NO_AMX, _OLD_CPU, None):
      choice = refresh_precision.choose("mirrored", "auto", None, cpu)
      self.assertEqual((choice.mixed_precision, choice.jit_compile), ("float32", True), cpu)
    self.assertIn("avx512_bf16 but no AMX",
                  refresh_precision.choose("cpu", "auto", None, _XEON_NO_AMX).reason)
    self.assertIn("could not be read", refresh_precision.choose("cpu", "auto", None, None).reason)

  def test_accelerators(self):
    tpu = refresh_precision.choose("tpu", "auto", None, _OLD_CPU)
    self.assertEqual((tpu.mixed_precision, tpu.jit_compile), ("mixed_bfloat16", True))
    ampere = refresh_precision.choose("mirrored", "auto", None, _OLD_CPU, [(8, 0), (9, 0)])
    self.assertEqual((ampere.mixed_precision, ampere.jit_compile), ("mixed_bfloat16", True))
    volta = refresh_precision.choose("mirrored", "auto", None, _XEON_AMX, [(7, 0)])
    self.assertEqual((volta.mixed_precision, volta.jit_compile), ("float32", True))

  def test_a_forced_setting_wins_and_the_other_half_follows_the_precision_used(self):
    forced = refresh_precision.choose("cpu", "float32", None, _EPYC)
    self.assertEqual((forced.mixed_precision, forced.jit_compile), ("float32", True))
    self.assertIn("forced: --mixed_precision=float32", forced.reason)
    bf16 = refresh_precision.choose("cpu", "mixed_bfloat16", None, _OLD_CPU)
    self.assertEqual((bf16.mixed_precision, bf16.jit_compile), ("mixed_bfloat16", False))
    xla = refresh_precision.choose("cpu", "auto", True, _EPYC)
    self.assertEqual((xla.mixed_precision, xla.jit_compile), ("mixed_bfloat16", True))
    self.assertIn("forced: --embed_jit_compile", xla.reason)
    off = refresh_precision.choose("tpu", "auto", False, None)
    self.assertFalse(off.jit_compile)
    self.assertIn("--noembed_jit_compile", off.reason)


class CpuInfoTest(absltest.TestCase):

  def _write(self, text):
    path = os.path.join(tempfile.mkdtemp(dir=absltest.TEST_TMPDIR.value), "cpuinfo")
    with open(path, "w") as f:
      f.write(text)
    return path

  def test_reads_the_first_processors_vendor_and_flags(self):
    path = self._write("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: X\n"
                       "flags\t\t: fpu avx512_bf16\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n"
                       "flags\t\t: fpu\n")
    self.assertEqual(refresh_precision.cpu_info(path), CpuInfo("AuthenticAMD", ["fpu", "avx512_bf16"]))

  def test_arm_features_and_missing_files(self):
    self.assertEqual(refresh_precision.cpu_info(self._write("Features\t: fp asimd bf16\n")),
                     CpuInfo("", ["fp", "asimd", "bf16"]))
    self.assertIsNone(refresh_precision.cpu_info(self._write("processor\t: 0\n")))
    self.assertIsNone(refresh_precision.cpu_info("/nonexistent/cpuinfo"))

  def test_this_machine_is_described(self):
    # Linux CI: the real /proc/cpuinfo parses (what the refresher reads at start).
    if os.path.exists("/proc/cpuinfo"):
      self.assertNotEmpty(refresh_precision.cpu_info().flags)


if __name__ == "__main__":
  absltest.main()
