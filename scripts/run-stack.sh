#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, starts the local stack on
# loopback, sends a workload, prints what happened and stops everything again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh > build.log 2>&1 || { tail -50 build.log; exit 1; }

RUN_DIR=$(mktemp -d /tmp/llmd-stack-XXXXXX)
TRAINER_PORT=${TRAINER_PORT:-8000}
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "logs kept in $RUN_DIR"
}
trap cleanup EXIT

wait_ok() {  # url, name
  for _ in $(seq 1 100); do
    if curl -sf "$1" > /dev/null; then return 0; fi
    sleep 0.1
  done
  echo "$2 did not become ready; log:"; cat "$RUN_DIR/$2.log"; exit 1
}

echo "== starting trainer on 127.0.0.1:$TRAINER_PORT (models in $RUN_DIR/models)"
build/trainer/trainer --host 127.0.0.1 --port "$TRAINER_PORT" --retraining-interval 1 \
  --ttft-model-path "$RUN_DIR/models/ttft.ubj" --tpot-model-path "$RUN_DIR/models/tpot.ubj" \
  --ttft-gated-model-path "$RUN_DIR/models/ttft_gated.bin" \
  --tpot-gated-model-path "$RUN_DIR/models/tpot_gated.bin" > "$RUN_DIR/trainer.log" 2>&1 &
PIDS+=($!)
wait_ok "http://127.0.0.1:$TRAINER_PORT/readyz" trainer

echo "== curl http://127.0.0.1:$TRAINER_PORT/readyz"
curl -s "http://127.0.0.1:$TRAINER_PORT/readyz"; echo
echo "== curl -X POST http://127.0.0.1:$TRAINER_PORT/predict"
curl -s -X POST "http://127.0.0.1:$TRAINER_PORT/predict" -H 'content-type: application/json' \
  -d '{"kv_cache_percentage":0.4,"input_token_length":1000,"num_request_waiting":0,"num_request_running":8,"num_tokens_generated":100,"prefix_cache_score":0.0}'
echo
echo "== feeding 3000 synthetic samples and waiting for a retrain"
build/bench/synthetic_feed --url "http://127.0.0.1:$TRAINER_PORT" --samples 3000
echo
echo "== curl http://127.0.0.1:$TRAINER_PORT/data/status (excerpt)"
curl -s "http://127.0.0.1:$TRAINER_PORT/data/status" | head -c 400; echo " ..."
echo "== hold-out evaluation (from /metrics)"
curl -s "http://127.0.0.1:$TRAINER_PORT/metrics" | grep -E '^(ttft|tpot)_(coverage_percent|quantile_loss|mape_percent)' || true

PREDICTOR_PORTS=${PREDICTOR_PORTS:-"8001 8002"}
for port in $PREDICTOR_PORTS; do
  echo "== starting predictor on 127.0.0.1:$port"
  build/predictor/predictor --host 127.0.0.1 --port "$port" \
    --training-server-url "http://127.0.0.1:$TRAINER_PORT" --model-sync-interval 2 \
    --local-ttft-model-path "$RUN_DIR/p$port/ttft.ubj" --local-tpot-model-path "$RUN_DIR/p$port/tpot.ubj" \
    --local-ttft-gated-model-path "$RUN_DIR/p$port/ttft_gated.bin" \
    --local-tpot-gated-model-path "$RUN_DIR/p$port/tpot_gated.bin" > "$RUN_DIR/predictor-$port.log" 2>&1 &
  PIDS+=($!)
  wait_ok "http://127.0.0.1:$port/readyz" "predictor-$port"
done
first_port=${PREDICTOR_PORTS%% *}
echo "== curl -X POST http://127.0.0.1:$first_port/predict/bulk/strict (3 candidate pods)"
curl -s -X POST "http://127.0.0.1:$first_port/predict/bulk/strict" -H 'content-type: application/json' -d '{"requests":[
 {"kv_cache_percentage":0.1,"input_token_length":1000,"num_request_waiting":0,"num_request_running":2,"num_tokens_generated":1,"prefix_cache_score":0.9},
 {"kv_cache_percentage":0.6,"input_token_length":1000,"num_request_waiting":3,"num_request_running":20,"num_tokens_generated":1,"prefix_cache_score":0.0},
 {"kv_cache_percentage":0.9,"input_token_length":1000,"num_request_waiting":8,"num_request_running":30,"num_tokens_generated":1,"prefix_cache_score":0.0}]}'
echo
echo "== predictor status"
curl -s "http://127.0.0.1:$first_port/status"; echo
