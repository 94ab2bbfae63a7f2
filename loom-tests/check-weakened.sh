#!/usr/bin/env bash
# Each weakened protocol must make its loom model fail, for the reason the real protocol
# prevents. Loom aborts the process on some failures (it cannot unwind through its own
# state), so each variant runs in a child process and we check its exit status and output.
set -uo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg watchcache_loom --cfg crossbeam_loom"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/loom}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"

# feature | test file | what the failure must say
variants=(
  "weaken-tail-relaxed|ring|at 0: [Err(\"lapped\")]"
  "weaken-no-recheck|hub|deadlock"
  "weaken-trim-relaxed|ring|entry 1 (revision 20) is the first after 15"
  "weaken-len-two-loads|ring|over capacity 2"
  "weaken-no-link-recheck|hub|deadlock"
  "weaken-bookmark-progress-late|hub|overtook event 1"
  "weaken-announce-early|snapshot|announced 2 but loaded a state at 1"
  "weaken-commit-each|hub|saw half of revision 2"
  "weaken-no-park-at-start|hub|expired by events it filters out"
  "weaken-no-lap-resume|hub|expired though nothing it needs was lost"
  "weaken-handover-now|hub|a gap or a duplicate at the hand-over"
)
status=0
for v in "${variants[@]}"; do
  IFS='|' read -r feature test expect <<<"$v"
  out=$(cargo test -q -p watchcache-loom-tests --release --features "$feature" --test "$test" -- weakened 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] && grep -qF -- "$expect" <<<"$out"; then
    echo "caught: $feature ($test): $expect"
  else
    echo "NOT CAUGHT: $feature ($test) exited $rc without \"$expect\""
    tail -20 <<<"$out"
    status=1
  fi
done
exit $status
