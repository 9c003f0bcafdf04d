#!/usr/bin/env bash
# Run one command alternately in two checkouts, ROUNDS times each: a before/after pair on
# one machine (a GPU's host state moves between calls; only pairs taken in one run
# compare). Each side's native module is built in place first; each run is headed
# "## before (DIR) round N" or "## after (DIR) round N", which
# `tools/probes/wake_parts.py summarize` reads.
#
#   git archive COMMIT | gzip > before.tar.gz     # here (the device's tree has no .git)
#   mkdir -p /tmp/before && tar xzf before.tar.gz -C /tmp/before      # on the device
#   tools/probes/tree_ab.sh /tmp/before 3 -- python3 tools/probes/wake_parts.py cpu
#
# The command runs from each checkout's root, with that checkout first on PYTHONPATH.
set -euo pipefail
before=$(cd "${1:?usage: tree_ab.sh BEFORE_DIR [ROUNDS] -- COMMAND...}" && pwd)
shift
rounds=3
if [[ "${1:-}" != "--" ]]; then
  rounds=$1
  shift
fi
[[ "${1:-}" == "--" ]] && shift
(($#)) || { echo "tree_ab.sh: no command after --" >&2; exit 2; }
here=$(cd "$(dirname "$0")/../.." && pwd)
for dir in "$before" "$here"; do
  (cd "$dir" && python3 setup.py build_ext --inplace -q >/dev/null 2>&1) ||
    { echo "tree_ab.sh: the native module did not build in $dir" >&2; exit 1; }
done
for round in $(seq "$rounds"); do
  for side in before after; do
    dir=$before
    [[ $side == after ]] && dir=$here
    echo "## $side ($dir) round $round"
    (cd "$dir" && PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" "$@") || echo "## (exit $?)"
  done
done
