"""bin/setup_env.sh's venv set-up with a venv named by REALM_TF_VENV: one that another checkout made is
refused by name and left as it is; a checkout's own venv is rebuilt when its stamp differs, also after the
checkout was moved or copied. And the tests' allocator: the jemalloc library is where its package put it.

A stand-in Python answers the set-up's checks, and fails `-m venv`: a run that gets as far as building
a venv stops there, having printed that it would, so no case installs anything.
"""

import json
import os
import shutil
import stat
import subprocess
import urllib.parse

from absl.testing import absltest

_SETUP_ENV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "setup_env.sh")
_VERSION = "Python 3.11.7"

_FAKE_PYTHON = f"""#!/usr/bin/env bash
case "$1" in
  --version) echo "{_VERSION}" ;;
  -c) exit 0 ;;
  *) echo "stand-in python: $*" >&2; exit 3 ;;
esac
"""


def _write_script(path: str, text: str) -> str:
  """An executable stand-in for a program the set-up runs."""
  with open(path, "w") as f:
    f.write(text)
  os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
  return path


def _run(setup_env: str, function: str, env: dict) -> subprocess.CompletedProcess:
  """Sources setup_env and calls one of its functions, as bin/test and bin/demo do."""
  return subprocess.run(["bash", "-c", f'source "{setup_env}" && {function}'],
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=60)


class SetupVenvTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.tmp = self.create_tempdir().full_path
    self.checkout = self._checkout("checkout")
    self.python = _write_script(os.path.join(self.tmp, "python"), _FAKE_PYTHON)

  def _checkout(self, name):
    root = os.path.join(self.tmp, name)
    os.makedirs(os.path.join(root, "bin"))
    shutil.copy(_SETUP_ENV, os.path.join(root, "bin", "setup_env.sh"))
    for file, text in (("requirements.txt", "tensorflow==2.20.0\n"), ("pyproject.toml", "[project]\n")):
      with open(os.path.join(root, file), "w") as f:
        f.write(text)
    return root

  def _venv(self, path, owner):
    # pip's record of an editable install from owner (PEP 610), as `pip install -e` writes it.
    record = os.path.join(path, "lib", "python3.11", "site-packages", "realm_tf-0.1.0.dist-info")
    os.makedirs(record)
    with open(os.path.join(record, "direct_url.json"), "w") as f:
      json.dump({"dir_info": {"editable": True}, "url": "file://" + urllib.parse.quote(owner)}, f)
    with open(os.path.join(path, "kept"), "w") as f:
      f.write("a file of the venv\n")
    return path

  def _setup(self, venv=None):
    env = {k: v for k, v in os.environ.items() if k != "REALM_TF_VENV"}
    env["REALM_TF_PYTHON"] = self.python
    if venv:
      env["REALM_TF_VENV"] = venv
    return _run(os.path.join(self.checkout, "bin", "setup_env.sh"), "realm_tf_setup_venv", env)

  def test_another_live_checkouts_venv_is_refused_and_kept(self):
    other = self._checkout("other")
    venv = self._venv(os.path.join(self.tmp, "shared_venv"), other)
    result = self._setup(venv)
    self.assertEqual(result.returncode, 1, result.stderr)
    self.assertIn(f"REALM_TF_VENV={venv} is the venv of the checkout {other}", result.stderr)
    self.assertIn(f"Unset REALM_TF_VENV to use {self.checkout}/.venv", result.stderr)
    self.assertNotIn("creating venv", result.stderr)
    self.assertTrue(os.path.exists(os.path.join(venv, "kept")))

  def test_a_venv_whose_checkout_is_gone_is_rebuilt(self):
    venv = self._venv(os.path.join(self.tmp, "moved_venv"), os.path.join(self.tmp, "gone"))
    result = self._setup(venv)
    self.assertIn(f"creating venv {venv}", result.stderr)
    self.assertIn("stand-in python: -m venv", result.stderr)
    self.assertFalse(os.path.exists(os.path.join(venv, "kept")))

  def test_a_copied_checkouts_own_venv_is_rebuilt(self):
    # cp -r of a checkout: its .venv names the original, which is still there.
    other = self._checkout("other")
    venv = self._venv(os.path.join(self.checkout, ".venv"), other)
    result = self._setup()
    self.assertIn(f"creating venv {venv}", result.stderr)
    self.assertFalse(os.path.exists(os.path.join(venv, "kept")))

  def test_a_checkout_path_pip_percent_encodes_is_read_back(self):
    other = self._checkout("other checkout")
    venv = self._venv(os.path.join(self.tmp, "shared_venv"), other)
    result = self._setup(venv)
    self.assertEqual(result.returncode, 1, result.stderr)
    self.assertIn(f"is the venv of the checkout {other} (", result.stderr)
    self.assertTrue(os.path.exists(os.path.join(venv, "kept")))


_FAKE_DPKG = """#!/usr/bin/env bash
# -s PACKAGE: installed; -L PACKAGE: the files listed in $FAKE_DPKG_FILES.
case "$1" in
  -s) exit 0 ;;
  -L) cat "$FAKE_DPKG_FILES" ;;
  *) exit 2 ;;
esac
"""


class JemallocTest(absltest.TestCase):

  def _jemalloc(self, listed):
    tmp = self.create_tempdir().full_path
    bin_dir = os.path.join(tmp, "bin")
    os.makedirs(bin_dir)
    _write_script(os.path.join(bin_dir, "dpkg"), _FAKE_DPKG)
    files = os.path.join(tmp, "files")
    with open(files, "w") as f:
      f.write("".join(path + "\n" for path in listed))
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_DPKG_FILES=files)
    return _run(_SETUP_ENV, "realm_tf_jemalloc", env)

  def test_the_library_is_where_the_package_put_it(self):
    lib_dir = self.create_tempdir().full_path
    lib = os.path.join(lib_dir, "libjemalloc.so.2")
    with open(lib, "w") as f:
      f.write("")
    result = self._jemalloc([lib_dir, os.path.join(lib_dir, "libjemalloc_pic.a"), lib])
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertEqual(result.stdout, lib + "\n")

  def test_a_listed_library_that_is_not_there_is_not_preloaded(self):
    missing = os.path.join(self.create_tempdir().full_path, "libjemalloc.so.2")
    result = self._jemalloc([missing])
    self.assertEqual(result.returncode, 0, result.stderr)
    # Whatever the usual places hold on this machine, never the missing file.
    self.assertNotIn(missing, result.stdout)
    for line in result.stdout.splitlines():
      self.assertTrue(os.path.isfile(line), line)


if __name__ == "__main__":
  absltest.main()
