"""Where the tests find the repository and the public data sets.

The public data sets the tests read live outside the repository; the test runners name their location in
REALM_TF_SHARED_DATA (bin/test for Bazel, conftest.py for pytest), so that no product or test code carries
a path outside the repository. Tests that need them call shared_data_dir() and skip when it returns None.
"""

import os
from typing import Optional

SHARED_DATA_ENV = "REALM_TF_SHARED_DATA"


def repo_root() -> str:
  """The repository root, found from this file's real location (Bazel runfiles are symlinks)."""
  return os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


def shared_data_dir() -> Optional[str]:
  """The shared data directory, $REALM_TF_SHARED_DATA; None when it is unset or not a directory."""
  path = os.environ.get(SHARED_DATA_ENV)
  return os.path.normpath(path) if path and os.path.isdir(path) else None


def shared_data_path(*parts: str) -> Optional[str]:
  """A file under the shared data directory, or None when the directory or the file is missing."""
  root = shared_data_dir()
  if root is None:
    return None
  path = os.path.join(root, *parts)
  return path if os.path.exists(path) else None


def missing_data_message(*parts: str) -> str:
  """Why a test that needs the shared data (or parts of it) skips, and how to give it the data."""
  what = f" ({os.path.join(*parts)})" if parts else ""
  return (f"shared data not found{what}: set ${SHARED_DATA_ENV} to the directory of the public data "
          "sets (bin/test and conftest.py set it beside the checkout)")
