"""The refresher's precision rule (refresh_precision.choose) on the machines it names, and the CPU flags
it reads."""

import os
import tempfile

from absl.testing import absltest

from realm_tf.retrieval import refresh_precision

_XEON = "fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni".split()
_OLD_CPU = "fpu sse2 avx2 fma".split()


class ChooseTest(absltest.TestCase):

  def test_cpu_with_bfloat16_instructions_embeds_in_bfloat16_without_xla(self):
    choice = refresh_precision.choose("cpu", "auto", None, _XEON)
    self.assertEqual((choice.mixed_precision, choice.jit_compile), ("mixed_bfloat16", False))
    self.assertIn("avx512_bf16", choice.reason)
    amx = refresh_precision.choose("mirrored", "auto", None, ["amx_bf16"])
    self.assertEqual(amx.mixed_precision, "mixed_bfloat16")

  def test_cpu_without_them_keeps_float32_with_xla(self):
    for flags in (_OLD_CPU, None):
      choice = refresh_precision.choose("cpu", "auto", None, flags)
      self.assertEqual((choice.mixed_precision, choice.jit_compile), ("float32", True), flags)
    self.assertIn("could not be read", refresh_precision.choose("cpu", "auto", None, None).reason)

  def test_accelerators(self):
    tpu = refresh_precision.choose("tpu", "auto", None, _OLD_CPU)
    self.assertEqual((tpu.mixed_precision, tpu.jit_compile), ("mixed_bfloat16", True))
    ampere = refresh_precision.choose("mirrored", "auto", None, _OLD_CPU, [(8, 0), (9, 0)])
    self.assertEqual((ampere.mixed_precision, ampere.jit_compile), ("mixed_bfloat16", True))
    volta = refresh_precision.choose("mirrored", "auto", None, _XEON, [(7, 0)])
    self.assertEqual((volta.mixed_precision, volta.jit_compile), ("float32", True))

  def test_a_forced_setting_wins_and_the_other_half_follows_the_precision_used(self):
    forced = refresh_precision.choose("cpu", "float32", None, _XEON)
    self.assertEqual((forced.mixed_precision, forced.jit_compile), ("float32", True))
    self.assertIn("forced: --mixed_precision=float32", forced.reason)
    bf16 = refresh_precision.choose("cpu", "mixed_bfloat16", None, _OLD_CPU)
    self.assertEqual((bf16.mixed_precision, bf16.jit_compile), ("mixed_bfloat16", False))
    xla = refresh_precision.choose("cpu", "auto", True, _XEON)
    self.assertEqual((xla.mixed_precision, xla.jit_compile), ("mixed_bfloat16", True))
    self.assertIn("forced: --embed_jit_compile", xla.reason)
    off = refresh_precision.choose("tpu", "auto", False, None)
    self.assertFalse(off.jit_compile)
    self.assertIn("--noembed_jit_compile", off.reason)


class CpuFlagsTest(absltest.TestCase):

  def _write(self, text):
    path = os.path.join(tempfile.mkdtemp(dir=absltest.TEST_TMPDIR.value), "cpuinfo")
    with open(path, "w") as f:
      f.write(text)
    return path

  def test_reads_the_first_processor_flags(self):
    path = self._write("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx512_bf16\n\n"
                       "processor\t: 1\nflags\t\t: fpu\n")
    self.assertEqual(refresh_precision.cpu_flags(path), ["fpu", "avx512_bf16"])

  def test_arm_features_and_missing_files(self):
    self.assertEqual(refresh_precision.cpu_flags(self._write("Features\t: fp asimd bf16\n")),
                     ["fp", "asimd", "bf16"])
    self.assertIsNone(refresh_precision.cpu_flags(self._write("processor\t: 0\n")))
    self.assertIsNone(refresh_precision.cpu_flags("/nonexistent/cpuinfo"))


if __name__ == "__main__":
  absltest.main()
