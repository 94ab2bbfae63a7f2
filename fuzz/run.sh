#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 30) on a copy of the seed corpus, printing each
# target's executions and any crash. Needs the nightly toolchain and cargo-fuzz
# (`cargo install cargo-fuzz`). Exits non-zero if any target finds a crash.
#   bash fuzz/run.sh [SECONDS] [TARGET ...]
set -uo pipefail
cd "$(dirname "$0")"
seconds="${1:-30}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(label_selector field_selector continue_token query json_codec write_body patch protobuf)
# No sanitizer: the code fuzzed here is safe Rust (the ring's unsafe code is checked by Miri
# and loom); debug assertions on, so arithmetic overflow is a crash.
flags=(--sanitizer none --debug-assertions)
cargo +nightly fuzz build "${flags[@]}" || exit 1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t" "$work/artifacts/$t"
  cp corpus/"$t"/* "$work/$t"/ 2>/dev/null
  log="$work/$t.log"
  cargo +nightly fuzz run "${flags[@]}" "$t" "$work/$t" -- \
    -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/artifacts/$t/" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  crashes=$(ls "$work/artifacts/$t" | wc -l)
  echo "fuzz $t: ${execs:-0} execs in ${seconds}s, exit $rc, $crashes crash artifacts"
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    status=1
    tail -40 "$log"
    for a in "$work/artifacts/$t"/*; do [ -e "$a" ] && { echo "--- $a"; xxd "$a" | head -20; }; done
  fi
done
exit $status
