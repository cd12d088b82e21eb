#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, then on loopback runs the same
# seeded trace through the EPP once per strategy (default predicted-latency pipeline,
# load+prefix (3,2,2), round-robin), each on fresh pods and a fresh EPP, and prints them side by
# side with a picture of latency over time (latency.svg). Raw results, metrics and logs stay in
# the folder named at the end.
#
# SCENARIO=mixed (default): 2 fast (h100) + 2 slow (A100-like) simulated pods, preset B (shared
#   system prompts), 40, 60, 80 req/s for 10 s each: the slow pods saturate first, so the pick
#   matters; the heuristics see queues and caches but not how fast a pod is. About two minutes.
# SCENARIO=idle: the smoke run: 4 fast pods, preset A at 6 and 12 req/s (nearly idle; only
#   the prefix hits differ).
# Overrides: WORKLOAD, STAGES, FAST_PODS, SLOW_PODS, SEED, STRATEGIES ("default load-prefix
#   round-robin", any subset in any order), OUT (copy latency.svg and compare.txt there).
# Ports (all loopback): POD_BASE_PORT (9100..), TRAINER_PORT (8000), PREDICTOR_PORTS ("8001 8002"),
# EPP_PORT (8080), EPP_HEALTH_PORT (9003), EPP_METRICS_PORT (9090).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
echo "== building (log: build.log)"
scripts/build.sh > build.log 2>&1 || { tail -50 build.log; exit 1; }

SCENARIO=${SCENARIO:-mixed}
case "$SCENARIO" in
  mixed) : "${WORKLOAD:=B}" "${STAGES:=40:10,60:10,80:10}" "${FAST_PODS:=2}" "${SLOW_PODS:=2}" ;;
  idle) : "${WORKLOAD:=A}" "${STAGES:=6:20,12:20}" "${FAST_PODS:=4}" "${SLOW_PODS:=0}" ;;
  *) echo "SCENARIO must be mixed or idle, not '$SCENARIO'"; exit 2 ;;
esac
SEED=${SEED:-1}
STRATEGIES=${STRATEGIES:-"default load-prefix round-robin"}
PODS=$((FAST_PODS + SLOW_PODS))
RUN_DIR=$(mktemp -d /tmp/llmd-stack-XXXXXX)
POD_BASE_PORT=${POD_BASE_PORT:-9100}
TRAINER_PORT=${TRAINER_PORT:-8000}
PREDICTOR_PORTS=${PREDICTOR_PORTS:-"8001 8002"}
EPP_PORT=${EPP_PORT:-8080}
EPP_HEALTH_PORT=${EPP_HEALTH_PORT:-9003}
EPP_METRICS_PORT=${EPP_METRICS_PORT:-9090}
LENGTH_SCALE=0.1  # short prompts and outputs: a run fits in two minutes on 2 cores
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "logs and results kept in $RUN_DIR"
}
trap cleanup EXIT
wait_ok() {  # url, log name
  for _ in $(seq 1 150); do
    if curl -sf "$1" > /dev/null; then return 0; fi
    sleep 0.1
  done
  echo "$2 did not become ready; log:"; tail -30 "$RUN_DIR/$2.log"; exit 1
}
stop() {  # pid...
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
}

# Fresh pods for every strategy, so each starts from empty caches. The KV cache is scaled with
# the sequence lengths (as the routing benchmark does), per profile.
POD_PIDS=()
start_pods() {  # log prefix
  POD_PIDS=()
  local blocks
  if [ "$FAST_PODS" -gt 0 ]; then
    blocks=$(awk -v k="$LENGTH_SCALE" 'BEGIN { printf "%d", 32000 * k + 0.5 }')
    build/bench/modelsim/modelsim --pods "$FAST_PODS" --base-port "$POD_BASE_PORT" --host 127.0.0.1 \
      --num-gpu-blocks "$blocks" --seed "$SEED" > "$RUN_DIR/$1-fast.log" 2>&1 &
    POD_PIDS+=($!); PIDS+=($!)
    wait_ok "http://127.0.0.1:$POD_BASE_PORT/health" "$1-fast"
  fi
  if [ "$SLOW_PODS" -gt 0 ]; then
    blocks=$(awk -v k="$LENGTH_SCALE" 'BEGIN { printf "%d", 16000 * k + 0.5 }')
    build/bench/modelsim/modelsim --pods "$SLOW_PODS" --base-port "$((POD_BASE_PORT + FAST_PODS))" \
      --host 127.0.0.1 --profile slow --num-gpu-blocks "$blocks" --seed "$((SEED + FAST_PODS))" \
      > "$RUN_DIR/$1-slow.log" 2>&1 &
    POD_PIDS+=($!); PIDS+=($!)
    wait_ok "http://127.0.0.1:$((POD_BASE_PORT + FAST_PODS))/health" "$1-slow"
  fi
}

echo "== trainer on 127.0.0.1:$TRAINER_PORT"
build/trainer/trainer --host 127.0.0.1 --port "$TRAINER_PORT" --retraining-interval 5 \
  --min-samples-for-retrain 50 \
  --ttft-model-path "$RUN_DIR/models/ttft.ubj" --tpot-model-path "$RUN_DIR/models/tpot.ubj" \
  --ttft-gated-model-path "$RUN_DIR/models/ttft_gated.bin" \
  --tpot-gated-model-path "$RUN_DIR/models/tpot_gated.bin" > "$RUN_DIR/trainer.log" 2>&1 &
PIDS+=($!)
wait_ok "http://127.0.0.1:$TRAINER_PORT/readyz" trainer

URLS=""
for port in $PREDICTOR_PORTS; do
  echo "== predictor on 127.0.0.1:$port"
  build/predictor/predictor --host 127.0.0.1 --port "$port" --workers 1 \
    --training-server-url "http://127.0.0.1:$TRAINER_PORT" --model-sync-interval 1 \
    --local-ttft-model-path "$RUN_DIR/p$port/ttft.ubj" --local-tpot-model-path "$RUN_DIR/p$port/tpot.ubj" \
    --local-ttft-gated-model-path "$RUN_DIR/p$port/ttft_gated.bin" \
    --local-tpot-gated-model-path "$RUN_DIR/p$port/tpot_gated.bin" > "$RUN_DIR/predictor-$port.log" 2>&1 &
  PIDS+=($!)
  wait_ok "http://127.0.0.1:$port/readyz" "predictor-$port"
  URLS="${URLS:+$URLS,}http://127.0.0.1:$port"
done

# load+prefix (3,2,2): load-prefix.yaml with the weights the routing benchmark found best.
awk '/pluginRef: prefix-cache-scorer/ {w = 3} /pluginRef: (queue|kv-cache)-scorer/ {w = 2}
     /weight:/ && w {sub(/weight: [0-9]+/, "weight: " w); w = 0} {print}' \
  "$ROOT/epp/config/load-prefix.yaml" > "$RUN_DIR/load-prefix-322.yaml"
pipeline_file() {  # strategy
  case "$1" in
    default) echo "$ROOT/epp/config/default-pipeline.yaml" ;;
    load-prefix) echo "$RUN_DIR/load-prefix-322.yaml" ;;
    round-robin) echo "$ROOT/epp/config/round-robin.yaml" ;;
    *) echo "STRATEGIES: unknown strategy '$1' (default, load-prefix, round-robin)" >&2; exit 2 ;;
  esac
}
label() {  # strategy
  case "$1" in
    default) echo "default pipeline" ;;
    load-prefix) echo "load+prefix (3-2-2)" ;;
    *) echo "$1" ;;
  esac
}

EPP_PID=""
start_epp() {  # strategy
  {
    echo "pool:"
    echo "  pods:"
    for i in $(seq 0 $((PODS - 1))); do
      echo "  - {name: pod-$i, address: 127.0.0.1:$((POD_BASE_PORT + i))}"
    done
    echo "scrapeIntervalMs: 25"
    echo "stalenessMs: 2000"
    echo "pipeline: $(pipeline_file "$1")"
  } > "$RUN_DIR/pool-$1.yaml"
  build/epp/epp --config "$RUN_DIR/pool-$1.yaml" --host 127.0.0.1 --port "$EPP_PORT" \
    --health-port "$EPP_HEALTH_PORT" --metrics-port "$EPP_METRICS_PORT" \
    --prediction-server-url "$URLS" --training-server-url "http://127.0.0.1:$TRAINER_PORT" \
    --allow-debug-header true > "$RUN_DIR/epp-$1.log" 2>&1 &
  EPP_PID=$!; PIDS+=($!)
  wait_ok "http://127.0.0.1:$EPP_HEALTH_PORT/readyz" "epp-$1"
}

run_load() {  # strategy
  build/bench/loadclient/loadclient --url "http://127.0.0.1:$EPP_PORT" --workload "$WORKLOAD" \
    --seed "$SEED" --length-scale "$LENGTH_SCALE" --stages "$STAGES" --stream \
    --max-requests 100000 --out-dir "$RUN_DIR/load-$1" --log-level warn \
    > "$RUN_DIR/load-$1.txt" 2>&1 || { cat "$RUN_DIR/load-$1.txt"; exit 1; }
  echo "   picks per pod: $(grep -o '"endpoint":"[^"]*"' "$RUN_DIR/load-$1/requests.jsonl" \
    | sed -E 's/.*:([0-9]+)"$/\1/' | sort -n | uniq -c \
    | awk -v base="$POD_BASE_PORT" -v fast="$FAST_PODS" \
        '{i = $2 - base; printf "pod-%d%s %s  ", i, (i >= fast ? " (slow)" : ""), $1}')"
}
metric() {  # file, series (the start of its line): its value, or "-"
  awk -v p="$2" 'index($0, p) == 1 {print $NF; found = 1; exit} END {if (!found) print "-"}' "$1"
}

echo "== scenario $SCENARIO: $FAST_PODS fast + $SLOW_PODS slow pods from 127.0.0.1:$POD_BASE_PORT," \
  "workload $WORKLOAD seed $SEED, stages $STAGES (requests/s:seconds)"
COMPARE=""
n=0
for strategy in $STRATEGIES; do
  n=$((n + 1))
  pipeline_file "$strategy" > /dev/null
  echo "== $n. $(label "$strategy") ($(basename "$(pipeline_file "$strategy")")), fresh pods and EPP"
  start_pods "pods-$strategy"
  start_epp "$strategy"
  if [ "$n" = 1 ]; then
    MODEL=$(curl -s "http://127.0.0.1:$POD_BASE_PORT/v1/models" | sed -E 's/.*"id":"([^"]+)".*/\1/')
    echo "   one request: the pod it picked, and why (x-llmd-debug)"
    curl -si -X POST "http://127.0.0.1:$EPP_PORT/v1/completions" -H 'content-type: application/json' \
      -H 'x-llmd-debug: 1' \
      -d "{\"model\":\"$MODEL\",\"prompt\":\"Tell me about the weather on Mars today\",\"max_tokens\":8}" \
      > "$RUN_DIR/one-request.txt"
    grep -iE '^(x-gateway-destination-endpoint|x-llmd-decision)' "$RUN_DIR/one-request.txt" \
      | tr -d '\r' | cut -c1-300 | sed 's/^/   /'
  fi
  run_load "$strategy"
  curl -s "http://127.0.0.1:$EPP_METRICS_PORT/metrics" > "$RUN_DIR/epp-metrics-$strategy.txt"
  if [ "$strategy" = default ]; then
    E="$RUN_DIR/epp-metrics-default.txt"
    echo "   EPP: $(metric "$E" 'llmd_epp_scheduling_predictions_total{used="true"}') cycles with" \
      "predictions, $(metric "$E" 'llmd_epp_scheduling_predictions_total{used="false"}') without" \
      "(the trainer starts empty and retrains every 5 s)"
  fi
  stop "$EPP_PID" "${POD_PIDS[@]}"
  COMPARE="${COMPARE:+$COMPARE,}$(label "$strategy")=$RUN_DIR/load-$strategy"
done
curl -s "http://127.0.0.1:$TRAINER_PORT/metrics" > "$RUN_DIR/trainer-metrics.txt"
M="$RUN_DIR/trainer-metrics.txt"
printf '   trainer: %s TTFT samples, model version %s; live TTFT error %.1f %%, p90 bound covering %.1f %%\n' \
  "$(metric "$M" 'llmd_trainer_samples_ingested_total{target="ttft"}')" \
  "$(metric "$M" 'llmd_trainer_model_version')" \
  "$(metric "$M" 'llmd_trainer_live_prediction_ape_percent{target="ttft"}' | sed 's/^-$/0/')" \
  "$(metric "$M" 'llmd_trainer_live_prediction_coverage_percent{target="ttft"}' | sed 's/^-$/0/')"

echo
echo "== the same trace through the EPP ($SCENARIO: workload $WORKLOAD seed $SEED, $FAST_PODS fast +" \
  "$SLOW_PODS slow pods, streamed; latencies as the client saw them)"
build/bench/loadclient/loadclient --compare "$COMPARE" --chart "$RUN_DIR/latency.svg" \
  | tee "$RUN_DIR/compare.txt"
echo "latency over time: $RUN_DIR/latency.svg (open it in a browser)"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT" && cp "$RUN_DIR/latency.svg" "$RUN_DIR/compare.txt" "$OUT/"
  echo "copied latency.svg and compare.txt to $OUT"
fi
echo "(raw results: $RUN_DIR/load-*/summary.json and requests.jsonl; metrics and logs next to them)"
