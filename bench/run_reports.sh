#!/usr/bin/env bash
# Regenerates every benchmark report that backs the README's numbers (about 45 min on 2 cores):
#   1. bench/results/routing/            virtual-time routing benchmark + PNG plots, seeds 1-3,
#                                        15-s stages (~25 min on 2 cores)
#   2. bench/results/prediction_scalability.{md,json}   real predictors via the EPP's client (~8 min)
#   3. bench/results/realstack/          one preset through the real binaries vs virtual time (~10 min)
# Each step also has its own command (see bench/cluster/README.md); this one runs them in order.
# Measurements hold /tmp/llmd-bench.lock so they never overlap another benchmark.
#   bench/run_reports.sh [routing] [scalability] [realstack]   # default: all three
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(routing scalability realstack)
[ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
for step in "${steps[@]}"; do
  case "$step" in
    routing)
      flock /tmp/llmd-bench.lock "$root/bench/cluster/run_report.sh" --seeds 1,2,3 \
        --stage-seconds 15 --strategies rr,lp111,lp322,pl_least,oracle ;;
    scalability)
      cmake --build "$build" -j2 --target prediction_scalability predictor trainer
      (cd "$root" && flock /tmp/llmd-bench.lock "$build/bench/prediction_scalability" \
        --replicas 1,2,3,4 --rates 1,10,100,1000,2000,2500,5000,7500,10000 --duration 5 \
        --predictor-workers 1) ;;
    realstack)
      "$root/bench/realstack/run_check.sh" ;;  # takes the lock itself
    *)
      echo "run_reports: unknown step '$step' (routing, scalability, realstack)" >&2; exit 2 ;;
  esac
done
echo "run_reports: done (${steps[*]})"
