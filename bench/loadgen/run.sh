#!/usr/bin/env bash
# Starts `gr00t serve` on the tiny fixture checkpoint, runs the load generator against it, stops
# the server (SIGTERM) and prints the summary. Usage (from the repository root):
#   bench/loadgen/run.sh [CLIENTS] [REQUESTS] [extra loadgen flags…]
# GR00T=path/to/gr00t picks the server binary (default target/release/gr00t, else target/debug).
set -euo pipefail
CLIENTS=${1:-16}; REQUESTS=${2:-200}; shift $(( $# > 2 ? 2 : $# ))
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
GR00T=${GR00T:-$ROOT/target/release/gr00t}
[ -x "$GR00T" ] || GR00T=$ROOT/target/debug/gr00t
PORT=${PORT:-24123}
(cd "$ROOT/bench/loadgen" && cargo build --release -q)
LOG=$(mktemp)
"$GR00T" serve --checkpoint "$ROOT/tests/fixtures/gr00t_n17_tiny/checkpoint" --port "$PORT" \
  --queue "${QUEUE:-8}" 2>"$LOG" &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
until grep -q "Application startup complete" "$LOG"; do
  kill -0 $PID 2>/dev/null || { cat "$LOG"; exit 1; }; sleep 0.5
done
ADDR=$(grep -o "listening on http://[^ ]*" "$LOG" | sed 's#listening on http://##')
set +e
"$ROOT/bench/loadgen/target/release/gr00t-loadgen" --addr "$ADDR" \
  --fixtures "$ROOT/tests/fixtures/gr00t_n17_tiny" --clients "$CLIENTS" --requests "$REQUESTS" "$@"
RC=$?
kill -TERM $PID; wait $PID; SRV=$?
echo "loadgen exit $RC; server exit $SRV; 5xx in the server log other than 503: \
$(grep -E 'POST /predict 5[0-9][0-9]' "$LOG" | grep -vc ' 503 ')"
exit $RC
