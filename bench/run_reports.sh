#!/usr/bin/env bash
# Regenerates the committed benchmark results (bench/README.md lists each with its question and
# file). Every step is one benchmark; with no step named, all of them run in this order (about
# 4.5 hours on 2 quiet cores). Times are for the shared 2-core development VM.
#   routing      bench/results/routing/{report.md,runs.csv,stages.csv,data,plots}   ~57 min
#   holdout      bench/results/routing/holdout/                                     ~16 min
#   suite        bench/results/routing/suite.{md,csv} (100 random scenarios)        ~21 min
#   ablation     bench/results/routing/ablation/ (dev suite seeds 11, 12)           ~60 min
#   replicas     bench/results/routing/replicas{.md,/} (active-active EPPs)         ~75 min
#   scalability  bench/results/prediction_scalability.{md,json}                     ~8 min
#   realstack    bench/results/realstack/                                           ~12 min
#   overhead     bench/results/epp_overhead{,_in_process}.{md,json}                 ~10 min
#   memory       bench/results/{trainer_bulk_memory,epp_memory}.{md,json}           ~4 min
#   attacks      bench/results/gateway_attacks.{md,json} (issue 49's attacks)       ~4 min
#   trainer      bench/results/trainer_bench.{md,json}                              ~2 min
#   predictor    bench/results/predictor_load.{md,json}                             ~2 min
# Measurements hold /tmp/llmd-bench.lock so they never overlap another benchmark.
#   bench/run_reports.sh [step ...]      bench/run_reports.sh --list
# Env: BUILD_DIR (default build), LABEL (the row label of labelled results; default current).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
label="${LABEL:-current}"
all=(routing holdout suite ablation replicas scalability realstack overhead memory attacks trainer predictor)
if [ "${1:-}" = --list ] || [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 0
fi
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=("${all[@]}")
for step in "${steps[@]}"; do
  case " ${all[*]} " in
    *" $step "*) ;;
    *) echo "run_reports: unknown step '$step' (${all[*]})" >&2; exit 2 ;;
  esac
done
[ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
# Builds sharing the tree take turns (a second build of the same objects would race).
build_targets() { flock /tmp/llmd-build.lock cmake --build "$build" -j2 --target "$@"; }
measure() { flock /tmp/llmd-bench.lock "$@"; }
sim="$build/bench/cluster/cluster_sim"
cd "$root"
for step in "${steps[@]}"; do
  echo "run_reports: $step ($(date -u +%H:%M:%S) UTC)"
  case "$step" in
    routing)
      measure bench/cluster/run_report.sh --seeds 1,2,3 --stage-seconds 15 \
        --strategies rr,lp111,lp322,pl_least,oracle ;;
    holdout)
      measure bench/cluster/run_report.sh --holdout --seeds 1,2,3 ;;
    suite)
      build_targets cluster_sim
      measure "$sim" --suite 100 --suite-quick --suite-seed 1 --suite-oracle-pods 12 --threads 2 \
        --out-dir bench/results/routing ;;
    ablation)
      # run_ablation.sh keeps runs it finds; a regeneration starts from none.
      rm -rf bench/results/routing/ablation/s[0-9]*-*/
      measure bench/cluster/run_ablation.sh ;;
    replicas)
      measure bench/cluster/run_replicas.sh ;;
    scalability)
      build_targets prediction_scalability predictor trainer
      measure "$build/bench/prediction_scalability" --replicas 1,2,3,4 \
        --rates 1,10,100,1000,2000,2500,5000,7500,10000 --duration 5 --predictor-workers 1 ;;
    realstack)
      bench/realstack/run_check.sh ;;  # takes the lock itself
    overhead)
      build_targets epp_overhead epp predictor trainer
      measure "$build/bench/epp_overhead" --label "$label"
      measure "$build/bench/epp_overhead" --label "$label-in-process" --in-process true \
        --out bench/results/epp_overhead_in_process ;;
    memory)
      build_targets trainer_bulk_memory epp_memory trainer epp modelsim
      measure "$build/bench/trainer_bulk_memory" --label "$label"
      measure "$build/bench/epp_memory" --label "$label"
      measure "$build/bench/epp_memory" --slow-readers 100 --label "$label-slow"
      measure "$build/bench/epp_memory" --ext-proc true --label "$label-gateway" ;;
    attacks)
      build_targets gateway_attacks epp modelsim
      measure "$build/bench/gateway_attacks" --seconds 10 ;;
    trainer)
      build_targets trainer_bench trainer
      measure "$build/bench/trainer_bench" ;;
    predictor)
      build_targets predictor_load predictor trainer
      measure "$build/bench/predictor_load" ;;
  esac
done
echo "run_reports: done (${steps[*]})"
