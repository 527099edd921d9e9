#!/usr/bin/env bash
# Whole-job compile (issue 16): `oneflowlike-plan --gpt` builds a 24-layer GPT training job,
# compiles every rank's part and checks it, from 8 to 1,024 ranks. For each layout: ranks, tasks
# in the whole plan, the tool's own seconds (build + compile + check), the process's wall time
# and its peak RSS (GNU time's "Maximum resident set size").
# Usage: bash scripts/bench/bench_whole_job.sh [LAYERS]   (after building oneflowlike-plan;
# default 24 layers). TIMEOUT (seconds per run, default 600), MEMORY_GIB (address-space limit
# per run, default 18: past it the run fails with std::bad_alloc instead of swapping or waking
# the OOM killer on a shared machine) and PLAN (the binary) may be set.
set -euo pipefail
cd "$(dirname "$0")/../.."
LAYERS=${1:-24}
TIMEOUT=${TIMEOUT:-600}
MEMORY_GIB=${MEMORY_GIB:-18}
PLAN=${PLAN:-build/compiler/oneflowlike-plan}
[[ -x $PLAN ]] || { echo "no $PLAN: build it with ninja -C build oneflowlike-plan" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "needs GNU time at /usr/bin/time" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# dp tp pp micro-batches
layouts=(
  "8 1 1 1"
  "8 8 1 1"
  "32 8 1 1"
  "128 8 1 1"
  "16 8 8 8"
)

echo "## Whole-job compile: GPT $LAYERS layers, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores"
echo
echo "| layout | ranks | tasks | compile s | wall s | peak RSS |"
echo "| --- | --- | --- | --- | --- | --- |"
for layout in "${layouts[@]}"; do
  read -r dp tp pp mb <<<"$layout"
  ranks=$((dp * tp * pp))
  name="dp $dp x tp $tp x pp $pp, $mb micro-batches"
  status=0
  (
    ulimit -v $((MEMORY_GIB * 1024 * 1024))
    exec /usr/bin/time -v -o "$work/time" timeout "$TIMEOUT" "$PLAN" --gpt "$LAYERS" --dp "$dp" \
      --tp "$tp" --pp "$pp" --micro-batches "$mb" >"$work/out" 2>"$work/err"
  ) || status=$?
  rss_kib=$(sed -n 's/^\s*Maximum resident set size (kbytes): //p' "$work/time")
  wall=$(sed -n 's/^\s*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time")
  rss="$(awk -v k="$rss_kib" 'BEGIN { printf "%.0f MiB", k / 1024 }')"
  if [[ $status -eq 124 ]]; then
    echo "| $name | $ranks | timed out | > $TIMEOUT | $wall | $rss (at the kill) |"
  elif grep -q bad_alloc "$work/err"; then
    echo "| $name | $ranks | out of memory (limit $MEMORY_GIB GiB) | | $wall | $rss (at the failure) |"
  elif [[ $status -ne 0 ]]; then
    echo "| $name | $ranks | failed (exit $status): $(head -c 200 "$work/err" | tr '\n|' ' /') | | $wall | $rss |"
  else
    # "whole job: N tasks, S s"
    read -r tasks seconds < <(sed -n 's/^whole job: \([0-9]*\) tasks, \([0-9.]*\) s$/\1 \2/p' \
      "$work/out")
    echo "| $name | $ranks | $tasks | $seconds | $wall | $rss |"
  fi
done
