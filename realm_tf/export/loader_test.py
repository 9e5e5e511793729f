"""Tests of the serving path's loader: a client that loads an export imports no training code."""

import json
import os
import subprocess
import sys

from absl.testing import absltest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What bin/serve and bin/answer import, and then which realm_tf and third-party modules that pulled in.
_PROBE = """
import json, sys
from realm_tf.export import loader
from realm_tf.serving import server
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in
                        ("realm_tf", "official", "orbit", "scann", "tensorflow_text", "tensorflow_datasets"))))
"""


class LoaderImportsTest(absltest.TestCase):

  def test_serving_imports_no_training_stack(self):
    env = dict(os.environ, PYTHONPATH=_REPO, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
    done = subprocess.run([sys.executable, "-c", _PROBE],
                          env=env,
                          cwd=_REPO,
                          capture_output=True,
                          text=True,
                          check=False)
    self.assertEqual(done.returncode, 0, done.stderr[-3000:])
    modules = json.loads(done.stdout.strip().splitlines()[-1])
    self.assertIn("realm_tf.export.loader", modules)
    self.assertIn("realm_tf.serving.server", modules)
    allowed = {
        "realm_tf", "realm_tf.export", "realm_tf.export.loader", "realm_tf.serving",
        "realm_tf.serving.server", "realm_tf.serving.page", "realm_tf.serving.rest_api"
    }
    # tensorflow_text and scann load with an export that needs them (load_saved_model), not before.
    self.assertEmpty(sorted(set(modules) - allowed))


if __name__ == "__main__":
  absltest.main()
