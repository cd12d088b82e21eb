#!/usr/bin/env bash
# The routing benchmark in one command: builds cluster_sim, runs every scenario under every
# strategy and seed (virtual time, deterministic per seed), writes bench/results/routing/
# (report.md, stages.csv, runs.csv, data/) and renders the PNG plots with gnuplot (installed
# from Debian's gnuplot-nox when missing).
#
#   bench/cluster/run_report.sh                 # the default set, seeds 1,2,3 (~20 min on 2 cores)
#   bench/cluster/run_report.sh --holdout       # the hold-out pool shapes -> .../routing/holdout/
#   bench/cluster/run_report.sh --quick         # small pools, short stages (smoke run)
#   bench/cluster/run_report.sh --scenarios C,slo --strategies rr,pl_least,oracle --seeds 1
#
# Other arguments go to cluster_sim (`cluster_sim --help`).
# Env: BUILD_DIR (default build), OUT_DIR (default bench/results/routing, or its holdout/
# subdirectory with --holdout), THREADS (default 2).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${BUILD_DIR:-$root/build}"
default_out="$root/bench/results/routing"
for arg in "$@"; do
  if [ "$arg" = --holdout ]; then default_out="$root/bench/results/routing/holdout"; fi
done
out="${OUT_DIR:-$default_out}"
threads="${THREADS:-2}"

if ! command -v gnuplot >/dev/null 2>&1; then
  echo "run_report: installing gnuplot-nox for the plots" >&2
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get install -y gnuplot-nox >/dev/null 2>&1 ||
    { $sudo apt-get update >/dev/null && $sudo apt-get install -y gnuplot-nox >/dev/null; }
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build"
fi
# Builds sharing the tree take turns (a second build of the same objects would race).
flock /tmp/llmd-build.lock cmake --build "$build" -j2 --target cluster_sim

start=$(date +%s)
rm -rf "$out/data" "$out/plots"
mkdir -p "$out"
cd "$root"
"$build/bench/cluster/cluster_sim" --out-dir "$out" --threads "$threads" "$@"
gnuplot -e "dir='$out'" "$root/bench/cluster/plots.gp"
echo "run_report: $out/report.md and $out/plots/ in $(( $(date +%s) - start )) s"
