#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, starts the local stack on
# loopback (modelsim pool, trainer, predictors, EPP), sends a short multi-turn workload through
# the EPP twice, with the default predicted-latency pipeline and with round-robin (fresh pods
# each time), prints a side-by-side summary and stops everything again. Raw results, metrics and
# logs stay in the folder named at the end.
#   WORKLOAD=A STAGES=8:20,16:20 PODS=4 scripts/run-stack.sh
# Ports (all loopback): POD_BASE_PORT (9100..), TRAINER_PORT (8000), PREDICTOR_PORTS ("8001 8002"),
# EPP_PORT (8080), EPP_HEALTH_PORT (9003), EPP_METRICS_PORT (9090).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
echo "== building (log: build.log)"
scripts/build.sh > build.log 2>&1 || { tail -50 build.log; exit 1; }

RUN_DIR=$(mktemp -d /tmp/llmd-stack-XXXXXX)
PODS=${PODS:-4}
POD_BASE_PORT=${POD_BASE_PORT:-9100}
TRAINER_PORT=${TRAINER_PORT:-8000}
PREDICTOR_PORTS=${PREDICTOR_PORTS:-"8001 8002"}
EPP_PORT=${EPP_PORT:-8080}
EPP_HEALTH_PORT=${EPP_HEALTH_PORT:-9003}
EPP_METRICS_PORT=${EPP_METRICS_PORT:-9090}
WORKLOAD=${WORKLOAD:-A}
STAGES=${STAGES:-"6:20,12:20"}
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "logs and results kept in $RUN_DIR"
}
trap cleanup EXIT
wait_ok() {  # url, name
  for _ in $(seq 1 150); do
    if curl -sf "$1" > /dev/null; then return 0; fi
    sleep 0.1
  done
  echo "$2 did not become ready; log:"; tail -30 "$RUN_DIR/$2.log"; exit 1
}

MODELSIM_PID=""
start_modelsim() {  # log name
  build/bench/modelsim/modelsim --pods "$PODS" --base-port "$POD_BASE_PORT" --host 127.0.0.1 \
    > "$RUN_DIR/$1.log" 2>&1 &
  MODELSIM_PID=$!
  PIDS+=("$MODELSIM_PID")
  wait_ok "http://127.0.0.1:$POD_BASE_PORT/health" "$1"
}
echo "== modelsim: $PODS simulated vLLM pods on 127.0.0.1:$POD_BASE_PORT.."
start_modelsim modelsim

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
    --training-server-url "http://127.0.0.1:$TRAINER_PORT" --model-sync-interval 2 \
    --local-ttft-model-path "$RUN_DIR/p$port/ttft.ubj" --local-tpot-model-path "$RUN_DIR/p$port/tpot.ubj" \
    --local-ttft-gated-model-path "$RUN_DIR/p$port/ttft_gated.bin" \
    --local-tpot-gated-model-path "$RUN_DIR/p$port/tpot_gated.bin" > "$RUN_DIR/predictor-$port.log" 2>&1 &
  PIDS+=($!)
  wait_ok "http://127.0.0.1:$port/readyz" "predictor-$port"
  URLS="${URLS:+$URLS,}http://127.0.0.1:$port"
done

{
  echo "pool:"
  echo "  pods:"
  for i in $(seq 0 $((PODS - 1))); do
    echo "  - {name: pod-$i, address: 127.0.0.1:$((POD_BASE_PORT + i))}"
  done
  echo "scrapeIntervalMs: 50"
  echo "stalenessMs: 2000"
  echo "pipeline: $ROOT/epp/config/default-pipeline.yaml"
} > "$RUN_DIR/pool.yaml"
echo "== epp on 127.0.0.1:$EPP_PORT (health :$EPP_HEALTH_PORT, metrics :$EPP_METRICS_PORT), predictors $URLS"
build/epp/epp --config "$RUN_DIR/pool.yaml" --host 127.0.0.1 --port "$EPP_PORT" \
  --health-port "$EPP_HEALTH_PORT" --metrics-port "$EPP_METRICS_PORT" \
  --prediction-server-url "$URLS" --training-server-url "http://127.0.0.1:$TRAINER_PORT" \
  --allow-debug-header true > "$RUN_DIR/epp.log" 2>&1 &
PIDS+=($!)
wait_ok "http://127.0.0.1:$EPP_HEALTH_PORT/readyz" epp

MODEL=$(curl -s "http://127.0.0.1:$POD_BASE_PORT/v1/models" | sed -E 's/.*"id":"([^"]+)".*/\1/')
echo "== one request through the EPP: the pod it picked, and why (x-llmd-debug)"
curl -si -X POST "http://127.0.0.1:$EPP_PORT/v1/completions" -H 'content-type: application/json' \
  -H 'x-llmd-debug: 1' \
  -d "{\"model\":\"$MODEL\",\"prompt\":\"Tell me about the weather on Mars today\",\"max_tokens\":8}" \
  > "$RUN_DIR/one-request.txt"
grep -iE '^(HTTP|x-gateway-destination-endpoint|x-llmd-decision)' "$RUN_DIR/one-request.txt" \
  | tr -d '\r' | cut -c1-400

# The same seeded trace, once per pipeline; the loadclient's own summary line goes to the log.
run_load() {  # out-dir name
  build/bench/loadclient/loadclient --url "http://127.0.0.1:$EPP_PORT" --workload "$WORKLOAD" \
    --length-scale 0.1 --stages "$STAGES" --stream --out-dir "$RUN_DIR/$1" --log-level warn \
    > "$RUN_DIR/$1.txt" 2>&1 || { cat "$RUN_DIR/$1.txt"; exit 1; }
  echo "   picks per pod: $(grep -o '"endpoint":"[^"]*"' "$RUN_DIR/$1/requests.jsonl" \
    | sed -E 's/.*:([0-9]+)"$/\1/' | sort | uniq -c \
    | awk -v base="$POD_BASE_PORT" '{printf "pod-%d %s  ", $2 - base, $1}')"
}
reloads() { grep -c 'config reloaded' "$RUN_DIR/epp.log" || true; }

echo "== workload $WORKLOAD, stages $STAGES (requests/s:seconds): 1/2 default pipeline"
run_load load-default
sleep 6  # one more feedback flush and retrain
curl -s "http://127.0.0.1:$TRAINER_PORT/data/status" > "$RUN_DIR/trainer-status.json"
curl -s "http://127.0.0.1:$TRAINER_PORT/metrics" > "$RUN_DIR/trainer-metrics.txt"
curl -s "http://127.0.0.1:$EPP_METRICS_PORT/metrics" > "$RUN_DIR/epp-metrics-default.txt"
metric() {  # file, series (the start of its line): its value, or "-"
  awk -v p="$2" 'index($0, p) == 1 {print $NF; found = 1; exit} END {if (!found) print "-"}' "$1"
}
M="$RUN_DIR/trainer-metrics.txt"
printf '   trainer: %s TTFT and %s TPOT samples, model version %s; hold-out MAPE TTFT %.1f %%, TPOT %.1f %%; live TTFT error %.1f %%\n' \
  "$(metric "$M" 'llmd_trainer_samples_ingested_total{target="ttft"}')" \
  "$(metric "$M" 'llmd_trainer_samples_ingested_total{target="tpot"}')" \
  "$(metric "$M" 'llmd_trainer_model_version')" \
  "$(metric "$M" 'llmd_trainer_holdout_mape_percent{target="ttft"}' | sed 's/^-$/0/')" \
  "$(metric "$M" 'llmd_trainer_holdout_mape_percent{target="tpot"}' | sed 's/^-$/0/')" \
  "$(metric "$M" 'llmd_trainer_live_prediction_ape_percent{target="ttft"}' | sed 's/^-$/0/')"
E="$RUN_DIR/epp-metrics-default.txt"
echo "   EPP: $(metric "$E" 'llmd_epp_scheduling_predictions_total{used="true"}') cycles with predictions, $(metric "$E" 'llmd_epp_scheduling_predictions_total{used="false"}') without"

echo "== 2/2 round-robin, on fresh pods (the same trace starts from empty caches again)"
kill "$MODELSIM_PID"; wait "$MODELSIM_PID" 2>/dev/null || true
start_modelsim modelsim-round-robin
before=$(reloads)
sed -i -E "s#^pipeline: .*#pipeline: $ROOT/epp/config/round-robin.yaml#" "$RUN_DIR/pool.yaml"
for _ in $(seq 1 100); do
  [ "$(reloads)" -gt "$before" ] && break
  sleep 0.1
done
[ "$(reloads)" -gt "$before" ] || { echo "the EPP did not reload round-robin.yaml"; tail -20 "$RUN_DIR/epp.log"; exit 1; }
wait_ok "http://127.0.0.1:$EPP_HEALTH_PORT/readyz" epp
run_load load-round-robin
curl -s "http://127.0.0.1:$EPP_METRICS_PORT/metrics" > "$RUN_DIR/epp-metrics-all.txt"

echo
echo "== the same trace through the EPP (workload $WORKLOAD, streamed; latencies as the client saw them)"
build/bench/loadclient/loadclient \
  --compare "default pipeline=$RUN_DIR/load-default,round-robin=$RUN_DIR/load-round-robin"
echo "(raw results: $RUN_DIR/load-*/summary.json and requests.jsonl; metrics and logs next to them)"
