#!/usr/bin/env bash
# Before/after pairs of tools/probes/hot_path_ab.py (issue #31's figures): the probe run
# in alternating processes, PAIRS times, against the checkout in BEFORE_DIR and this one
# (each one's native module built in place first); then each row's median per side,
# its spread (max - min) and after / before.
#
#   git archive COMMIT | tar -x -C ab-before     # the "before" checkout
#   tools/probes/hot_path_ab.sh ab-before [PAIRS]
set -euo pipefail
before=$(cd "$1" && pwd)
pairs=${2:-3}
here=$(cd "$(dirname "$0")/../.." && pwd)
for dir in "$before" "$here"; do
  (cd "$dir" && python3 setup.py build_ext --inplace -q >/dev/null 2>&1)
done
lines=$(mktemp)
for _ in $(seq "$pairs"); do
  for side in before after; do
    dir=$before
    [[ $side == after ]] && dir=$here
    echo "$side $(cd /tmp && PYTHONPATH="$dir" python3 "$here/tools/probes/hot_path_ab.py")" |
      tee -a "$lines"
  done
done
python3 - "$lines" <<'PY'
import json, statistics, sys
rows = {"before": [], "after": []}
for line in open(sys.argv[1]):
    side, data = line.split(" ", 1)
    rows[side].append(json.loads(data))
print(f"{'row':<14}{'before':>12}{'spread':>10}{'after':>12}{'spread':>10}{'after/before':>14}")
for key in rows["after"][0]:
    b = [r[key] for r in rows["before"] if key in r]
    a = [r[key] for r in rows["after"]]
    mb, ma = statistics.median(b), statistics.median(a)
    print(f"{key:<14}{mb:>12.2f}{max(b) - min(b):>10.2f}{ma:>12.2f}{max(a) - min(a):>10.2f}"
          f"{ma / mb:>14.3f}")
for side in ("before", "after"):
    med = {k: statistics.median(r[k] for r in rows[side]) for k in rows[side][0]}
    if "raw_launch" in med:
        print(f"{side}: await/raw asyncio {med['await_asyncio'] / med['raw_asyncio']:.3f}, "
              f"uvloop {med['await_uvloop'] / med['raw_uvloop']:.3f} (target <= 1.0); "
              f"submit_on/raw cuLaunchKernel {med['submit_on'] / med['raw_launch']:.3f} "
              "(target <= 1.6)")
PY
