"""Where the tests find the repository and the public data sets.

The public data sets the tests read live outside the repository, in ../shared/data (see its README);
bin/test passes their location to Bazel tests as REALM_TF_SHARED_DATA. Tests that need them call
shared_data_dir() and skip when it returns None.
"""

import os
from typing import Optional

SHARED_DATA_ENV = "REALM_TF_SHARED_DATA"


def repo_root() -> str:
  """The repository root, found from this file's real location (Bazel runfiles are symlinks)."""
  return os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


def shared_data_dir() -> Optional[str]:
  """The shared data directory: $REALM_TF_SHARED_DATA if set, else <repo>/../shared/data; None if absent."""
  path = os.environ.get(SHARED_DATA_ENV) or os.path.join(repo_root(), "..", "shared", "data")
  path = os.path.normpath(path)
  return path if os.path.isdir(path) else None


def shared_data_path(*parts: str) -> Optional[str]:
  """A file under the shared data directory, or None when the directory or the file is missing."""
  root = shared_data_dir()
  if root is None:
    return None
  path = os.path.join(root, *parts)
  return path if os.path.exists(path) else None
