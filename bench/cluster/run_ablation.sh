#!/usr/bin/env bash
# Ablation of the default pipeline on the quick generalization suite (issue 28 item 3): each
# component switched off alone, predicted-latency only, against one baseline run of every
# heuristic on the same suite seeds; then the table (ablation_table.py). The variants are made
# from epp/config/default-pipeline.yaml here, so they follow the file as it changes.
# Usage: run_ablation.sh [suite seed ...]   (default: the development seeds 11 12)
# Cost: ~3-6 min per variant and seed on 2 quiet cores (12 variants + the baseline).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${BUILD_DIR:-$root/build}"
out="${OUT_DIR:-$root/bench/results/routing/ablation}"
sim="$build/bench/cluster/cluster_sim"
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(11 12)
flock /tmp/llmd-build.lock cmake --build "$build" -j2 --target cluster_sim
mkdir -p "$out/pipelines"
base="$out/pipelines/default.yaml"
grep -v '^ *#' "$root/epp/config/default-pipeline.yaml" > "$base"

# name|what it switches off|sed program on the default pipeline. Settings that are the
# plugins' defaults (the corrections, the queue escape) are switched off by adding a line.
producer='/- type: predicted-latency-producer/a\  parameters:\n'
variants=(
  "no-pod-residual|per-pod residual scaling|${producer}    podResidualCorrection: false"
  "no-step-phase|step-phase shift of the TTFT|${producer}    stepPhaseCorrection: false"
  "no-slo-calibration|SLO bound calibration|${producer}    sloBoundCalibration: false"
  "no-strict-gate|strict prefix-affinity gate (0.99)|/pluginRef: strict-affinity/d"
  "no-loose-gate|loose prefix-affinity gate (0.70)|/pluginRef: loose-affinity/d"
  "no-queue-escape|the gates' queue escape|/    threshold: /a\    queueEscape: false"
  "upstream-break|gates broken at a 5-s predicted penalty (upstream's), queue escape kept|/    threshold: /a\    maxTTFTPenaltyMs: 5000"
  "no-exploration|gate exploration (1 %, upstream's default)|/    threshold: /a\    explorationProbability: 0.0"
  "no-rotation|near-best rotation (tolerance 0)|s/tolerance: [0-9.]*/tolerance: 0.0/"
  "composite-1-1-1|composite weights 3,2,2 -> 1,1,1|s/compositePrefixWeight: [0-9.]*/compositePrefixWeight: 1/;s/compositeQueueWeight: [0-9.]*/compositeQueueWeight: 1/;s/compositeKvWeight: [0-9.]*/compositeKvWeight: 1/"
  "proportional-draw|score^100 draw of cached requests -> proportional|s/cachedRequestExponent: [0-9.]*/cachedRequestExponent: 1/"
  "slo-draw|SLO requests no pod has cached drawn ~ score^10 instead of rotated (the previous default)|/cachedRequestExponent: /a\    uncachedSloRequestExponent: 10"
  "fixed-depth-2048|measured index capacity -> 4 chars per token, depth 2048 blocks (the previous default)|s/measuredCapacity: true/maxPrefixBlocksToMatch: 2048/"
)
for seed in "${seeds[@]}"; do
  [ -f "$out/s$seed-baseline/suite.csv" ] ||
    "$sim" --suite-quick --suite-seed "$seed" --strategies rr,lp111,lp322,pl_least --threads 2 \
      --out-dir "$out/s$seed-baseline" > "$out/s$seed-baseline.log"
  for v in "${variants[@]}"; do
    IFS='|' read -r name what prog <<< "$v"
    sed -e "$prog" "$base" > "$out/pipelines/$name.yaml"
    if cmp -s "$base" "$out/pipelines/$name.yaml"; then
      echo "variant $name changes nothing in the default pipeline" >&2
      exit 1
    fi
    [ -f "$out/s$seed-$name/suite.csv" ] ||
      "$sim" --suite-quick --suite-seed "$seed" --strategies pl_least --threads 2 \
        --pipeline-file "$out/pipelines/$name.yaml" --out-dir "$out/s$seed-$name" \
        > "$out/s$seed-$name.log"
    printf '%s|%s\n' "$name" "$what" >> "$out/variants.txt.tmp"
  done
done
awk '!seen[$0]++' "$out/variants.txt.tmp" > "$out/variants.txt" && rm -f "$out/variants.txt.tmp"
python3 "$root/bench/cluster/ablation_table.py" "$out" "${seeds[@]}" | tee "$out/table.md"
