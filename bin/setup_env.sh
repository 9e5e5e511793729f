# Sourced by bin/demo and bin/test: makes sure the Debian packages and the Python venv exist, so that a
# fresh clone needs nothing else. The venv lives in $REALM_TF_VENV (default: <repo>/.venv) and is rebuilt
# only when requirements.txt (or the Python version) changes: its hash is stamped inside the venv. realm_tf
# itself is installed into it editable (pip install -e), redone when pyproject.toml changes.
set -euo pipefail

REALM_TF_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REALM_TF_VENV="${REALM_TF_VENV:-$REALM_TF_ROOT/.venv}"
export REALM_TF_ROOT REALM_TF_VENV

_realm_log() { echo "[realm_tf setup] $*" >&2; }

# Installs the named Debian packages that are missing (apt-get needs root or sudo).
realm_tf_apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { _realm_log "need root to install: ${missing[*]}"; return 1; }
    sudo="sudo"
  fi
  _realm_log "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

realm_tf_python() {
  # TensorFlow 2.20 wheels exist for CPython 3.9-3.13.
  for candidate in "${REALM_TF_PYTHON:-}" python3.11 python3.12 python3.10 python3; do
    [ -n "$candidate" ] && command -v "$candidate" >/dev/null && { command -v "$candidate"; return 0; }
  done
  realm_tf_apt_install python3 python3-venv && command -v python3
}

# Installs requirements.txt into the venv with uv (pip's fallback on failure is the caller's): the same
# pins, every index searched as pip searches them; it downloads, unpacks and compiles in parallel and links
# from its cache: the whole set-up 26-42 s where pip's took 69 (AMD EPYC, 2 cores; docs/testing.md). uv
# reads neither pip.conf nor PIP_*: pip's index settings and certificate are passed on. Bytecode is
# compiled at install, as pip does: without it, where PYTHONDONTWRITEBYTECODE is set, every process
# compiles TensorFlow's modules again (its import took 8.8 s of CPU instead of 3.3).
_realm_uv_install() {
  local venv_pip="$REALM_TF_VENV/bin/pip" value item
  local args=(--python "$REALM_TF_VENV/bin/python" --index-strategy unsafe-best-match)
  "$venv_pip" install -q --disable-pip-version-check uv >/dev/null 2>&1 || return 1
  value="${PIP_INDEX_URL:-$("$venv_pip" config get global.index-url 2>/dev/null || true)}"
  [ -n "$value" ] && args+=(--index-url "$value")
  value="${PIP_EXTRA_INDEX_URL:-$("$venv_pip" config get global.extra-index-url 2>/dev/null || true)}"
  for item in $value; do args+=(--extra-index-url "$item"); done
  value="${PIP_FIND_LINKS:-$("$venv_pip" config get global.find-links 2>/dev/null || true)}"
  for item in $value; do args+=(--find-links "$item"); done
  value="${SSL_CERT_FILE:-${PIP_CERT:-$("$venv_pip" config get global.cert 2>/dev/null || true)}}"
  env ${value:+SSL_CERT_FILE="$value"} "$REALM_TF_VENV/bin/uv" pip install -q --compile-bytecode "${args[@]}" \
    -r "$REALM_TF_ROOT/requirements.txt" >&2
}

realm_tf_setup_venv() {
  local python deps_stamp stamp
  python="$(realm_tf_python)"
  "$python" -c 'import venv, ensurepip' 2>/dev/null || realm_tf_apt_install python3-venv
  # Two stamps: requirements.txt (with the Python version and the repo path) decides whether the venv is
  # rebuilt; pyproject.toml on top of it only whether realm_tf's editable install is redone.
  deps_stamp="$( (cat "$REALM_TF_ROOT/requirements.txt"; echo "$REALM_TF_ROOT"; "$python" --version) \
                 | sha256sum | cut -d' ' -f1)"
  stamp="$( (cat "$REALM_TF_ROOT/requirements.txt" "$REALM_TF_ROOT/pyproject.toml"; echo "$REALM_TF_ROOT";
             "$python" --version) | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$REALM_TF_VENV/.requirements.sha256" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  # A venv named by REALM_TF_VENV that another checkout, still there, made and installed realm_tf into
  # (editable, from that checkout): rebuilding it here would delete it under that checkout's running
  # programs and point its realm_tf at this one. A checkout's own .venv is rebuilt as before, also when the
  # checkout was moved or copied (its stamp names the old path). The owner is where pip's record of the
  # editable install (PEP 610's direct_url.json) says it came from, percent-decoded.
  local owner
  owner="$(sed -n 's|.*"url": *"file://\([^"]*\)".*|\1|p' \
             "$REALM_TF_VENV"/lib/python*/site-packages/realm_tf-*.dist-info/direct_url.json 2>/dev/null \
           | head -n 1 || true)"
  owner="$(printf '%b' "${owner//%/\\x}")"
  if [ "$REALM_TF_VENV" != "$REALM_TF_ROOT/.venv" ] && [ -n "$owner" ] && [ "$owner" != "$REALM_TF_ROOT" ] \
     && [ -f "$owner/bin/setup_env.sh" ]; then
    _realm_log "REALM_TF_VENV=$REALM_TF_VENV is the venv of the checkout $owner (realm_tf is installed" \
               "into it from there); making it this checkout's would delete it under that checkout's" \
               "programs. Unset REALM_TF_VENV to use $REALM_TF_ROOT/.venv, or name a directory of this" \
               "checkout's own."
    exit 1
  fi
  if [ "$(cat "$REALM_TF_VENV/.deps.sha256" 2>/dev/null)" != "$deps_stamp" ]; then
    _realm_log "creating venv $REALM_TF_VENV from requirements.txt (under a minute with uv, a few with pip; once)"
    rm -rf "$REALM_TF_VENV"
    "$python" -m venv "$REALM_TF_VENV"
    "$REALM_TF_VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v "is ignored" >&2 || true
    if ! _realm_uv_install; then
      _realm_log "uv was not available or failed: installing with pip"
      "$REALM_TF_VENV/bin/pip" install -q --disable-pip-version-check -r "$REALM_TF_ROOT/requirements.txt" 2>&1 \
        | grep -v "is ignored" >&2 || true
    fi
    "$REALM_TF_VENV/bin/python" -c 'import tensorflow, tensorflow_text, tf_keras, official, orbit, scann' \
      || { _realm_log "the venv at $REALM_TF_VENV did not install; see the pip output above"; exit 1; }
    echo "$deps_stamp" > "$REALM_TF_VENV/.deps.sha256"
  fi
  # realm_tf itself, editable (pyproject.toml): every command in README then runs from any directory
  # without PYTHONPATH. No build isolation, so nothing beyond setuptools and wheel (already in the venv:
  # TensorFlow needs them; else from PyPI) is fetched.
  _realm_log "installing realm_tf into $REALM_TF_VENV (pip install -e, editable)"
  # setuptools' own notices (beta pyproject support, editable-install advice) are not for the user: pip's
  # output goes to a log that is shown only when the install fails.
  local pip_log="$REALM_TF_VENV/pip-install-realm_tf.log"
  if ! { "$REALM_TF_VENV/bin/pip" install -q --disable-pip-version-check "setuptools>=61" wheel &&
         "$REALM_TF_VENV/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation \
           -e "$REALM_TF_ROOT"; } > "$pip_log" 2>&1 \
     || ! (cd / && "$REALM_TF_VENV/bin/python" -I -c 'import realm_tf') 2>> "$pip_log"; then
    # Isolated (-I: no PYTHONPATH, no current directory on sys.path): only the install can satisfy it.
    cat "$pip_log" >&2
    _realm_log "pip install -e $REALM_TF_ROOT failed (output above, also in $pip_log)"
    exit 1
  fi
  echo "$stamp" > "$REALM_TF_VENV/.requirements.sha256"
}

# jemalloc as the allocator of the tests' TensorFlow processes (bin/test's LD_PRELOAD): tracing, eager ops
# and small tensors come and go by the thousand, and glibc's malloc spends more CPU on them. Measured on AMD
# EPYC (2 cores, five alternating pairs): realm_tf/training/train_lib_test.py took 40.2 s of CPU with
# jemalloc and 44.6 s without, every pair lower; the whole suite 1,048 s against 1,242 (docs/testing.md).
# Not for bin/demo: its steps run XLA-compiled, and it took 664 s of CPU with jemalloc against 657 without,
# the same numbers printed. Installs libjemalloc2 where apt can and prints the library to preload; where it
# is not there, nothing: the tests then run on glibc's malloc, slower, not different.
realm_tf_jemalloc() {
  realm_tf_apt_install libjemalloc2 >&2 || _realm_log "no libjemalloc2: running on glibc's malloc"
  local lib
  # Where the package put it (any Debian architecture), else the usual places (a library installed
  # without dpkg).
  lib="$(dpkg -L libjemalloc2 2>/dev/null | grep '/libjemalloc\.so\.2$' | head -n 1 || true)"
  for lib in $lib /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/aarch64-linux-gnu/libjemalloc.so.2 \
             /usr/lib64/libjemalloc.so.2 /usr/lib/libjemalloc.so.2; do
    [ -f "$lib" ] && { echo "$lib"; return 0; }
  done
  return 0
}

# Quiet TensorFlow's C++ start-up noise and keep Keras on tf_keras (Model Garden needs Keras 2).
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
export TF_USE_LEGACY_KERAS=1
# No PYTHONPATH: realm_tf is installed in the venv (editable), and Bazel's py_test puts its runfiles on
# sys.path itself.
