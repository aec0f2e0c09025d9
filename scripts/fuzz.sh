#!/usr/bin/env bash
# Fuzzes every target of fuzz/ for a bounded time, starting from its committed corpus
# (fuzz/corpus/<target>/), with cargo-fuzz on the nightly toolchain (installed when
# missing; stable stays the default toolchain).
#
#   IDEM_FUZZ_SECONDS   seconds per target (default 25)
#   IDEM_FUZZ_TARGETS   the targets to run, space-separated (default: all)
#
# New inputs go to a scratch corpus, never into the committed one. A crash fails the
# script; its input is in fuzz/artifacts/<target>/: add it to fuzz/corpus/<target>/
# (the workspace's `cargo test` then replays it on stable) and fix the bug.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds=${IDEM_FUZZ_SECONDS:-25}

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

targets=${IDEM_FUZZ_TARGETS:-$(cargo +nightly fuzz list)}
# Optimized, with debug assertions and overflow checks (cargo-fuzz's default).
cargo +nightly fuzz build

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
summary=()
for target in $targets; do
  mkdir -p "$scratch/$target"
  log="$scratch/$target.log"
  printf 'fuzz %s for %s s\n' "$target" "$seconds"
  if ! cargo +nightly fuzz run "$target" "$scratch/$target" "corpus/$target" -- \
      -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log"
    printf 'fuzz target %s FAILED; the input is in fuzz/artifacts/%s/\n' "$target" "$target" >&2
    exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  found=$(find "$scratch/$target" -type f | wc -l)
  summary+=("$(printf '%-18s %4s s %12s runs %9s/s %6s new inputs' "$target" "$seconds" "$runs" "$rate" "$found")")
done
printf '\n'
printf '%s\n' "${summary[@]}"
