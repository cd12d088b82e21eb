#!/usr/bin/env bash
# Real-stack check (issue #7): one preset through the real binaries (modelsim pods, EPP, and for
# predicted-latency the trainer + 2 predictors), each strategy on a fresh stack, next to
# cluster_sim's virtual-time run of the same trace; writes bench/results/realstack/.
#
#   bench/realstack/run_check.sh                  # ~10 min on 2 cores (+ any wait for the lock)
#   TIME_SCALE=0.5 OUT_DIR=/tmp/rs bench/realstack/run_check.sh   # ~5 min, 2x the stack overhead
#
# Env: PRESET (C), STAGES (simulated req/s:s, "20:15,40:15,60:15"), PODS (10), SEED (1),
# LENGTH_SCALE (0.1), TIME_SCALE (0.25), STRATEGIES ("rr lp111 pl_least"), BUILD_DIR, OUT_DIR.
#
# Time scale s: modelsim's engines advance s simulated ms per wall ms, so the loadclient gets the
# same stages stretched (rate x s, duration / s: the same arrivals, 1/s times later) and
# multiplies what it measures by s. s < 1 slows the GPU down so that the fixed wall-clock costs
# of the real stack (HTTP hops, SSE relay, timer slack, 2-core contention) shrink by s when
# rescaled. Every other clock is scaled to match cluster_sim in simulated time: metric scrapes
# 50 ms, retrain 10 s, client timeout 60 s.
#
# The measurement holds /tmp/llmd-bench.lock (the script re-executes itself under flock), so
# it never overlaps another benchmark on this machine; do not wrap it in another flock.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${BUILD_DIR:-$root/build}"
out="${OUT_DIR:-$root/bench/results/realstack}"
preset="${PRESET:-C}"
stages="${STAGES:-20:15,40:15,60:15}"
pods="${PODS:-10}"
seed="${SEED:-1}"
length_scale="${LENGTH_SCALE:-0.1}"
ts="${TIME_SCALE:-0.25}"
strategies="${STRATEGIES:-rr lp111 pl_least}"

if [ -z "${REALSTACK_LOCKED:-}" ]; then
  # Outside the lock: building never disturbs another benchmark's timing much, waiting would.
  [ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build"
  cmake --build "$build" -j2 --target cluster_sim modelsim loadclient epp trainer predictor \
    > /dev/null
  echo "run_check: waiting for /tmp/llmd-bench.lock" >&2
  REALSTACK_LOCKED=1 exec flock /tmp/llmd-bench.lock "$BASH" "$0" "$@"
fi

run="$(mktemp -d /tmp/llmd-realstack-XXXXXX)"
pids=()
stop_all() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; echo "run_check: logs in $run" >&2' EXIT

calc() { awk "BEGIN { printf \"%.6g\", $1 }"; }
# N ports free now; with "contiguous", a block of N starting at the printed port.
free_ports() {
  python3 - "$1" "${2:-}" <<'EOF'
import random, socket, sys
n, block = int(sys.argv[1]), sys.argv[2] == "contiguous"
def bind(port):
    s = socket.socket(); s.bind(("127.0.0.1", port)); return s
for _ in range(200):
    held = []
    try:
        if block:
            base = random.randint(20000, 60000 - n)
            held = [bind(base + i) for i in range(n)]
        else:
            held = [bind(0) for _ in range(n)]
        print(" ".join(str(s.getsockname()[1]) for s in (held[:1] if block else held)))
        break
    except OSError:
        pass
    finally:
        for s in held: s.close()
else:
    sys.exit("no free ports")
EOF
}
wait_ok() {  # url log
  for _ in $(seq 1 200); do
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.1
  done
  echo "run_check: $1 not ready; tail of $2:" >&2; tail -20 "$2" >&2; exit 1
}
cpu_s() {  # user+system CPU seconds of a live pid
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$1/stat"
}
busy_ticks() { awk '/^cpu /{ print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8 }' /proc/stat; }

wall_stages=""
total_wall=0
IFS=, read -ra st <<< "$stages"
for s in "${st[@]}"; do
  wall_stages+="${wall_stages:+,}$(calc "${s%%:*} * $ts"):$(calc "${s##*:} / $ts")"
  total_wall=$(calc "$total_wall + ${s##*:} / $ts")
done
mkdir -p "$out"
start=$(date +%s)

echo "== cluster_sim (virtual time): preset $preset, stages $stages, $pods pods" >&2
# --time-scale 1: the stack below scrapes and retrains on simulated time, unscaled.
vcmd=("$build/bench/cluster/cluster_sim" --preset "$preset" --stages "$stages" --pods "$pods"
  --seed "$seed" --length-scale "$length_scale" --time-scale 1 --strategies "${strategies// /,}"
  --threads 2 --out-dir "$run/virtual")
(cd "$root" && "${vcmd[@]}") > "$run/virtual.log"
cp "$run/virtual/stages.csv" "$out/virtual_stages.csv"

pipeline_of() {
  case "$1" in
    rr) echo round-robin.yaml ;; lp111) echo load-prefix.yaml ;;
    pl_least) echo default-pipeline.yaml ;; *) echo "unknown strategy $1" >&2; exit 2 ;;
  esac
}
num_blocks=$(awk -v k="$length_scale" 'BEGIN { printf "%d", 32000 * k + 0.5 }')
facts="$run/facts.tsv"
: > "$facts"
for strat in $strategies; do
  d="$run/$strat"
  mkdir -p "$d"
  echo "== real stack: $strat (time scale $ts, ~${total_wall%.*} s of load)" >&2
  base=$(free_ports "$pods" contiguous)
  read -r epp_port health_port metrics_port trainer_port p1 p2 <<< "$(free_ports 6)"
  ms=("$build/bench/modelsim/modelsim" --pods "$pods" --base-port "$base" --host 127.0.0.1
    --time-scale "$ts" --num-gpu-blocks "$num_blocks" --seed "$seed")
  "${ms[@]}" > "$d/modelsim.log" 2>&1 &
  pids+=($!); ms_pid=$!
  wait_ok "http://127.0.0.1:$base/health" "$d/modelsim.log"
  pl_flags=()
  if [ "$strat" = pl_least ]; then
    # One fit thread leaves a core to the data path; the fit itself stays as in cluster_sim.
    "$build/trainer/trainer" --host 127.0.0.1 --port "$trainer_port" --fit-threads 1 \
      --retraining-interval "$(calc "10 / $ts")" --log-level warn \
      --ttft-model-path "$d/m/ttft.ubj" --tpot-model-path "$d/m/tpot.ubj" \
      --ttft-gated-model-path "$d/m/ttft_gated.bin" \
      --tpot-gated-model-path "$d/m/tpot_gated.bin" > "$d/trainer.log" 2>&1 &
    pids+=($!); side_pids=($!)
    wait_ok "http://127.0.0.1:$trainer_port/readyz" "$d/trainer.log"
    for p in $p1 $p2; do
      "$build/predictor/predictor" --host 127.0.0.1 --port "$p" --workers 1 --log-level warn \
        --training-server-url "http://127.0.0.1:$trainer_port" --model-sync-interval 1 \
        --local-ttft-model-path "$d/p$p/ttft.ubj" --local-tpot-model-path "$d/p$p/tpot.ubj" \
        --local-ttft-gated-model-path "$d/p$p/ttft_gated.bin" \
        --local-tpot-gated-model-path "$d/p$p/tpot_gated.bin" > "$d/predictor-$p.log" 2>&1 &
      pids+=($!); side_pids+=($!)
      wait_ok "http://127.0.0.1:$p/readyz" "$d/predictor-$p.log"
    done
    pl_flags=(--prediction-server-url "http://127.0.0.1:$p1,http://127.0.0.1:$p2"
      --training-server-url "http://127.0.0.1:$trainer_port")
  fi
  {
    echo "pool:"
    echo "  pods:"
    for i in $(seq 0 $((pods - 1))); do
      echo "  - {name: pod-$i, address: 127.0.0.1:$((base + i)), labels: {class: h100}}"
    done
    echo "scrapeIntervalMs: $(calc "int(50 / $ts + 0.5)")"
    echo "stalenessMs: $(calc "int(2000 / $ts + 0.5)")"
    echo "pipeline: $root/epp/config/$(pipeline_of "$strat")"
  } > "$d/pool.yaml"
  (cd "$root" && exec "$build/epp/epp" --config "$d/pool.yaml" --host 127.0.0.1 \
    --port "$epp_port" --health-port "$health_port" --metrics-port "$metrics_port" \
    --log-level warn "${pl_flags[@]}") > "$d/epp.log" 2>&1 &
  pids+=($!); epp_pid=$!
  wait_ok "http://127.0.0.1:$health_port/readyz" "$d/epp.log"

  read -r b0 t0 < <(busy_ticks)
  lc=("$build/bench/loadclient/loadclient" --url "http://127.0.0.1:$epp_port"
    --workload "$preset" --seed "$seed" --length-scale "$length_scale" --stages "$wall_stages"
    --time-scale "$ts" --max-requests 1000000 --max-in-flight 1024
    --max-duration-s "$(calc "$total_wall + 120 / $ts")" --request-timeout-s "$(calc "60 / $ts")"
    --out-dir "$d/load" --log-level warn)
  /usr/bin/time -f "%U %S" -o "$d/loadclient.cpu" "${lc[@]}" | tee "$d/loadclient.out" >&2
  read -r b1 t1 < <(busy_ticks)
  if [ "$strat" = pl_least ]; then
    sleep 2  # the last feedback flush
    curl -s "http://127.0.0.1:$trainer_port/metrics" > "$d/trainer.metrics" || true
    cpu_pl="$(for p in "${side_pids[@]}"; do echo -n " $(cpu_s "$p")"; done)"
  fi
  curl -s "http://127.0.0.1:$metrics_port/metrics" > "$d/epp.metrics" || true
  sched=$(awk '/^llmd_epp_scheduling_duration_seconds_(sum|count)/ { v[$1] = $2 }
    END { c = v["llmd_epp_scheduling_duration_seconds_count"]
          if (c > 0) printf "%.3f", 1000 * v["llmd_epp_scheduling_duration_seconds_sum"] / c }' \
    "$d/epp.metrics")
  printf '%s\tsched_ms\t%s\n' "$strat" "$sched" >> "$facts"
  printf '%s\tbusy_pct\t%s\n' "$strat" "$(calc "100 * ($b1 - $b0) / ($t1 - $t0)")" >> "$facts"
  printf '%s\tcpu_s\tmodelsim %s epp %s loadclient %s%s\n' "$strat" "$(cpu_s "$ms_pid")" \
    "$(cpu_s "$epp_pid")" "$(awk '{ printf "%.1f", $1 + $2 }' "$d/loadclient.cpu")" \
    "${cpu_pl:+ trainer/predictors$cpu_pl}" >> "$facts"
  printf '%s\tcommand\t%s\n' "$strat" "${lc[*]}" >> "$facts"
  printf '%s\tstack\t%s | epp --config pool.yaml %s\n' "$strat" "${ms[*]}" "${pl_flags[*]}" \
    >> "$facts"
  stop_all
  unset cpu_pl
done

python3 "$root/bench/realstack/report.py" --run-dir "$run" --out-dir "$out" --preset "$preset" \
  --stages "$stages" --wall-stages "$wall_stages" --pods "$pods" --seed "$seed" \
  --length-scale "$length_scale" --time-scale "$ts" --strategies "$strategies" \
  --virtual-command "${vcmd[*]}" --elapsed-s "$(( $(date +%s) - start ))"
echo "run_check: $out/report.md in $(( $(date +%s) - start )) s" >&2
