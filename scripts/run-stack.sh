#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, starts the local stack on
# loopback (modelsim pool, trainer, predictors, EPP), sends a short multi-turn workload through
# the EPP, prints what happened and stops everything again.
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

echo "== modelsim: $PODS simulated vLLM pods on 127.0.0.1:$POD_BASE_PORT.."
build/bench/modelsim/modelsim --pods "$PODS" --base-port "$POD_BASE_PORT" --host 127.0.0.1 \
  > "$RUN_DIR/modelsim.log" 2>&1 &
PIDS+=($!)
wait_ok "http://127.0.0.1:$POD_BASE_PORT/health" modelsim

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
  > "$RUN_DIR/epp.log" 2>&1 &
PIDS+=($!)
wait_ok "http://127.0.0.1:$EPP_HEALTH_PORT/readyz" epp

MODEL=$(curl -s "http://127.0.0.1:$POD_BASE_PORT/v1/models" | sed -E 's/.*"id":"([^"]+)".*/\1/')
echo "== one request through the EPP (note x-gateway-destination-endpoint)"
curl -si -X POST "http://127.0.0.1:$EPP_PORT/v1/completions" -H 'content-type: application/json' \
  -d "{\"model\":\"$MODEL\",\"prompt\":\"Tell me about the weather on Mars today\",\"max_tokens\":8}" \
  | grep -iE '^(HTTP|x-gateway)|"usage"' | cut -c1-160

echo "== workload $WORKLOAD, stages $STAGES (requests/s:seconds), through the EPP"
build/bench/loadclient/loadclient --url "http://127.0.0.1:$EPP_PORT" --workload "$WORKLOAD" \
  --length-scale 0.1 --stages "$STAGES" --stream --out-dir "$RUN_DIR/load" --log-level warn

echo
echo "== picks per pod"
grep -o '"endpoint":"[^"]*"' "$RUN_DIR/load/requests.jsonl" | sort | uniq -c
sleep 6  # one more feedback flush and retrain
echo "== trainer: samples and hold-out quality of the model trained from this traffic"
curl -s "http://127.0.0.1:$TRAINER_PORT/data/status" | sed -E 's/"bucket_distribution":\{[^}]*\},?//' | cut -c1-400; echo
curl -s "http://127.0.0.1:$TRAINER_PORT/metrics" | grep -E '^(ttft|tpot)_(coverage_percent|mape_percent)\{idx="0"' || true
echo "== prediction error as the EPP saw it (EWMA of |predicted-actual|/actual, %)"
curl -s "http://127.0.0.1:$TRAINER_PORT/metrics" | grep -E '^llmd_trainer_live_prediction_ape_percent' || true
echo "== EPP metrics (excerpt)"
curl -s "http://127.0.0.1:$EPP_METRICS_PORT/metrics" | grep -E '^(inference_objective_request_(ttft|predicted_ttft)_seconds_(sum|count)|llmd_epp_scheduling_predictions_total|llmd_epp_pool)' || true
