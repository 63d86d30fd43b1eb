#!/usr/bin/env bash
# Prints a hash of the actions of every DROID and multi-embodiment fixture case in f32 and bf16
# for one gr00t binary, so that a refactor can show its answers are bit for bit those of the
# landed binary: run it with both and diff the outputs.
#   tools/action_hashes.sh target/debug/gr00t > new.txt
set -euo pipefail
bin=${1:?usage: tools/action_hashes.sh GR00T_BINARY}
fixtures="$(cd "$(dirname "$0")/.." && pwd)/tests/fixtures"
hash_actions() {
  python3 -c 'import hashlib, json, sys
r = json.load(sys.stdin)
body = json.dumps([r["actions"], r.get("actions_normalized")], sort_keys=True)
print(hashlib.sha256(body.encode()).hexdigest()[:16])'
}
for dtype in f32 bf16; do
  for set in gr00t_n17_tiny gr00t_n17_tiny_multi; do
    for case in "$fixtures/$set"/case*; do
      printf '%s %s/%s ' "$dtype" "$set" "$(basename "$case")"
      "$bin" predict --checkpoint "$fixtures/$set/checkpoint" --request "$case/request.json" \
        --dtype "$dtype" 2>/dev/null | hash_actions
    done
  done
done
