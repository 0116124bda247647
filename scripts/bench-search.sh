#!/usr/bin/env bash
# Search-strategy benchmark on the replay spaces: the strategy comparison, then the
# transfer check (leave-one-out: pre-train on the other spaces, report how the checkpoint ranks
# the held-out one, compare with a cold policy).
# usage: scripts/bench-search.sh [SPACE.json...]   (default: /work/shared/data/replay/*.json)
# env: KILN_BUILD_DIR (build), SEEDS (20), BUDGET (1000), SKIP_TRANSFER=1, SKIP_COMPARE=1
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${KILN_BUILD_DIR:-build}
SEEDS=${SEEDS:-20}
BUDGET=${BUDGET:-1000}
if [ $# -gt 0 ]; then spaces=("$@"); else spaces=(/work/shared/data/replay/*.json); fi
[ -f "$BUILD/build.ninja" ] || [ -f "$BUILD/Makefile" ] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "${KILN_JOBS:-$(nproc)}" --target kiln-bench-search kiln-agent
bench="$BUILD/bench/kiln-bench-search"
agent="$BUILD/agent/kiln-agent"

if [ -z "${SKIP_COMPARE:-}" ]; then
  echo "== strategies: $SEEDS seeds, budget $BUDGET"
  "$bench" --space "${spaces[@]}" --strategy default random annealing evolution \
    --seeds "$SEEDS" --budget "$BUDGET"
fi

if [ -z "${SKIP_TRANSFER:-}" ] && [ ${#spaces[@]} -gt 1 ]; then
  echo "== transfer: pre-trained on the other spaces vs cold, $SEEDS seeds, budget $BUDGET"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  for held in "${spaces[@]}"; do
    others=()
    for s in "${spaces[@]}"; do [ "$s" = "$held" ] || others+=("$s"); done
    ckpt="$work/$(basename "$held" .json).pt"
    "$agent" pretrain --data "${others[@]}" --eval "$held" --out "$ckpt" 2>"$work/pretrain.log" \
      || { cat "$work/pretrain.log"; exit 1; }
    grep "held out" "$work/pretrain.log" || true  # what the checkpoint knows of the held-out space
    "$bench" --space "$held" --strategy policy "policy:$ckpt" --seeds "$SEEDS" \
      --budget "$BUDGET" | sed "s|policy:$ckpt|policy+pretrained|"
  done
fi
