#!/usr/bin/env bash
# bash examples/flower/run_local_deployment.sh qfedavg outputs/flower/qfedavg
# A real Flower deployment on this machine: one SuperLink and three SuperNodes (localhost),
# the fedmoo rule ALGO as the ServerApp's strategy, 3 rounds; writes OUT.npz (final global
# model) and OUT.json (per-round server diagnostics and client evaluation).
set -euo pipefail
ALGO=${1:-fedavg}
OUT=$(realpath -m "${2:-outputs/flower/$ALGO}")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=$(mktemp -d)
export FLWR_HOME=$WORK/home FLWR_DISABLE_UPDATE_CHECK=1
export PYTHONPATH=$HERE${PYTHONPATH:+:$PYTHONPATH}:$ROOT
mkdir -p "$FLWR_HOME" "$(dirname "$OUT")"
cat > "$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "local-deployment"

[superlink.local-deployment]
address = "127.0.0.1:8000"
insecure = true
TOML

pids=()
cleanup() {
  for pid in "${pids[@]}"; do pkill -P "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
# fedmoo is already installed here: do not let the SuperLink build a fresh environment per run.
flower-superlink --insecure --disable-runtime-dependency-installation > "$WORK/superlink.log" 2>&1 &
pids+=($!)
sleep 5
for k in 0 1 2; do
  flower-supernode --insecure --superlink 127.0.0.1:8000 --port $((9094 + k)) \
    --node-config "partition-id=$k" > "$WORK/node$k.log" 2>&1 &
  pids+=($!)
done
flwr run "$HERE" local-deployment --stream \
  --run-config "algo=\"$ALGO\" out=\"$OUT\" num-clients=3 clients-per-round=3 num-server-rounds=3"
ls "$OUT.npz" "$OUT.json"
