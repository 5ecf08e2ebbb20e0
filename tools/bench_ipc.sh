#!/usr/bin/env bash
# End-to-end IPC streaming benchmark: the traced-app example writes as fast as it can;
# `eptrace collect` attaches over the diagnostics socket in Block mode (lossless) and
# writes the trace to disk. Prints events/s end to end (events on disk / collect's wall
# time, which includes draining the backlog after the stop) and the time from collect
# starting to the first event on disk.
#
#   bash tools/bench_ipc.sh [SECONDS] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-3}
threads=${2:-1}
cargo build --quiet --release -p eptrace -p eventpipe --example traced-app
cargo build --quiet --release -p eptrace
out=$(mktemp -d)
trap 'kill $app 2>/dev/null || true; rm -rf "$out"' EXIT

./target/release/examples/traced-app --rate 0 --threads "$threads" >"$out/app.out" &
app=$!
sleep 0.5
start=$(date +%s.%N)
./target/release/eptrace collect -p "$app" --providers Demo --buffering block \
  --duration "${seconds}s" --no-rundown -o "$out/t.nettrace" >"$out/summary" 2>/dev/null
end=$(date +%s.%N)
kill $app; wait $app 2>/dev/null || true
events=$(grep -o 'Collected [0-9]* events' "$out/summary" | grep -o '[0-9]*')
lost=$(grep -o '[0-9]* events lost' "$out/summary" | grep -o '^[0-9]*')
python3 -c "import sys; e,s,t=int(sys.argv[1]),float(sys.argv[2]),float(sys.argv[3]); print(f'throughput: {e} events in {t-s:.2f} s = {e/(t-s)/1e6:.2f} M events/s end to end, {sys.argv[4]} lost ({sys.argv[5]} writer threads, Block mode)')" "$events" "$start" "$end" "$lost" "$threads"

./target/release/examples/traced-app --rate 1000 >"$out/app.out" &
app=$!
sleep 0.5
for i in 1 2 3 4 5; do
  ./target/release/eptrace collect -p "$app" --providers Demo --duration 300ms \
    -o "$out/l.nettrace" 2>/dev/null | grep -o 'first event arrived [0-9]* ms'
done
