#!/usr/bin/env bash
# Active-active EPP replicas (issue 32): the preset scenarios (seed 1) and the quick
# generalization suite (suite seed 1) with 1, 2 and 4 replicas, without and with sharing, and
# 2 replicas with one trainer each; then the comparison table (bench/results/routing/replicas.md
# holds the committed one). ~75 min of CPU on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${BUILD_DIR:-$root/build}"
out="${OUT_DIR:-$root/bench/results/routing/replicas}"
sim="$build/bench/cluster/cluster_sim"
flock /tmp/llmd-build.lock cmake --build "$build" -j2 --target cluster_sim
mkdir -p "$out"
suite=(--suite-quick --suite-seed 1 --strategies rr,lp111,lp322,pl_least --threads 2)
presets=(--seeds 1 --stage-seconds 15 --strategies lp322,pl_least --threads 2)
for n in 1 2 4; do
  "$sim" "${suite[@]}" --epp-replicas $n --out-dir "$out/suite_n$n" > "$out/suite_n$n.log"
  "$sim" "${presets[@]}" --epp-replicas $n --out-dir "$out/presets_n$n" > "$out/presets_n$n.log"
done
"$sim" "${suite[@]}" --epp-replicas 2 --replica-training own --out-dir "$out/suite_n2own" > "$out/suite_n2own.log"
for n in 2 4; do
  "$sim" "${presets[@]}" --epp-replicas $n --replica-sharing scrape --out-dir "$out/presets_n${n}share" > "$out/presets_n${n}share.log"
done
"$sim" "${suite[@]}" --epp-replicas 2 --replica-sharing scrape --out-dir "$out/suite_n2share" > "$out/suite_n2share.log"
"$sim" "${suite[@]}" --epp-replicas 2 --replica-sharing decision --out-dir "$out/suite_n2exact" > "$out/suite_n2exact.log"
rm -rf "$out"/presets_n*/data "$out"/presets_n*/plots "$out"/presets_n*/report.md
python3 "$root/bench/cluster/replicas_table.py" "$out" | tee "$out/tables.md"
