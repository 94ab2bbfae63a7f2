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
[ ${#targets[@]} -gt 0 ] || targets=(label_selector field_selector continue_token query json_codec write_body patch protobuf json_patch_growth yaml_apply request_attributes crd_schema)
# Every target runs under a memory limit, so that an input whose cost is not bounded (a
# patch's copies or YAML aliases expanding a few kilobytes into gigabytes) is a crash, not a
# slow run: 256 MB, three times what any target needs with its bounds in force (a target
# process peaks at about 57 MB, json_patch_growth at 78 MB with 3 MiB of copies), and an
# eighth of libFuzzer's default (2 GB), which an amplification could stay under for the
# whole run. libFuzzer also takes it as the largest single allocation. (With the copy bound
# taken out, json_patch_growth's seed `doubling` is an out-of-memory crash at once.)
rss_limit_mb=256
# And a time limit per input: one that takes longer (a rule whose cost escaped its estimate, a
# pattern compiled at length) is a crash, not a slow unit. No target's input needs a second.
timeout=10
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
  # A target with a dictionary of its input's tokens (JSON keywords, CEL functions) gets it.
  # CRD schemas and their objects get inputs up to 64 KiB (libFuzzer's default is 4 KiB): a
  # rule's cost grows with the object it runs on, and an escape from the estimate shows at
  # that size as a crash under the memory limit or the timeout.
  extra=()
  [ -f "$t.dict" ] && extra+=(-dict="$PWD/$t.dict")
  [ "$t" = crd_schema ] && extra+=(-max_len=65536)
  cargo +nightly fuzz run "${flags[@]}" "$t" "$work/$t" -- "${extra[@]}" -timeout="$timeout" \
    -max_total_time="$seconds" -rss_limit_mb="$rss_limit_mb" -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$t/" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  crashes=$(ls "$work/artifacts/$t" | wc -l)
  peak=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  echo "fuzz $t: ${execs:-0} execs in ${seconds}s, peak RSS ${peak:-?} MB (limit $rss_limit_mb), exit $rc, $crashes crash artifacts"
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    status=1
    tail -40 "$log"
    for a in "$work/artifacts/$t"/*; do [ -e "$a" ] && { echo "--- $a"; xxd "$a" | head -20; }; done
  fi
done
exit $status
