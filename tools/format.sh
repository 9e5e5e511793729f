#!/usr/bin/env bash
# Formats every tracked Python file in the declared style (.style.yapf: Google's, 110 columns) with the
# pinned yapf of requirements.txt, or with --check lists the files that differ from it and fails; CI runs
# the check (.ci/run). Run bin/test (or bin/setup_env.sh) once first: it creates the venv that has yapf.
#
#   tools/format.sh            # rewrite the files in place
#   tools/format.sh --check    # exit 1 naming each file that is not formatted
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
yapf="${REALM_TF_VENV:-$root/.venv}/bin/yapf"
if [[ ! -x "$yapf" ]]; then
  echo "tools/format.sh: $yapf not found: run bin/test or bin/setup_env.sh first (requirements.txt pins yapf)" >&2
  exit 2
fi
cd "$root"
mapfile -t files < <(git ls-files '*.py')
case "${1:-}" in
  --check)
    # --diff prints what it would change; only the file names are kept, so the message stays short.
    if ! out="$("$yapf" --diff --parallel "${files[@]}")"; then
      echo "tools/format.sh --check: these files are not in the declared style (.style.yapf); run tools/format.sh:" >&2
      grep '^+++ ' <<<"$out" | sed 's/^+++ //; s/[[:space:]]*(reformatted)$//' | sort -u >&2
      exit 1
    fi
    echo "tools/format.sh --check: ${#files[@]} files in the declared style"
    ;;
  "")
    "$yapf" --in-place --parallel "${files[@]}"
    ;;
  *)
    echo "usage: tools/format.sh [--check]" >&2
    exit 2
    ;;
esac
