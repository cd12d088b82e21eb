#!/usr/bin/env bash
# The routing benchmark in one command: builds cluster_sim, runs every scenario under every
# strategy (virtual time, deterministic for the seed), writes bench/results/routing/ (report.md,
# stages.csv, runs.csv, data/) and renders the PNG plots with gnuplot (installed from Debian's
# gnuplot-nox when missing).
#
#   bench/cluster/run_report.sh                 # the full set (~3 min on 2 cores)
#   bench/cluster/run_report.sh --quick         # small pools, short stages (smoke run)
#   bench/cluster/run_report.sh --scenarios C,slo --strategies rr,pl_least,oracle
#
# Env: BUILD_DIR (default build), OUT_DIR (default bench/results/routing), THREADS (default 2).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${BUILD_DIR:-$root/build}"
out="${OUT_DIR:-$root/bench/results/routing}"
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
cmake --build "$build" -j2 --target cluster_sim

start=$(date +%s)
rm -rf "$out/data" "$out/plots"
mkdir -p "$out"
cd "$root"
"$build/bench/cluster/cluster_sim" --out-dir "$out" --threads "$threads" "$@"
gnuplot -e "dir='$out'" "$root/bench/cluster/plots.gp"
echo "run_report: $out/report.md and $out/plots/ in $(( $(date +%s) - start )) s"
