#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and PyTorch: the checks that need a real GPU, each a command a
# user would type. The embedded platform finds the GPUs through NVML; a job asking for no GPU
# sees none and one asking for a GPU sees exactly one; a torchrun job trains with the NCCL
# backend on it; a chat model (the tiny random Llama of kiban.testing.models) is served on it
# behind the router, streamed and timed; the allreduce sweep runs on NCCL across the GPUs
# (scripts/sweep-check.sh; with one GPU it says it skips NCCL, and sweeps 2 CPU nodes on gloo).
# Prints "gpu-check: ok" at the end, or fails.
# Usage: scripts/gpu-check.sh [DIR]   (DIR keeps the logs; default a new temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/kiban-up.sh
ROOT="$PWD"
export KIBAN_HOME="${1:-$(mktemp -d /tmp/kiban-gpu.XXXXXX)}"
mkdir -p "$KIBAN_HOME"
say() { printf '\n$ %s\n' "$*" >&2; }
fail() { echo "gpu-check: FAILED: $*" >&2; exit 1; }

nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
GPUS=$(nvidia-smi -L | grep -c '^GPU ')

say "kiban node-agent --once --json     # every GPU check through NVML, kept as test fixtures"
kiban node-agent --once --json > "$KIBAN_HOME/health.json"
python - "$KIBAN_HOME/health.json" "$ROOT/tests/health/fixtures/recorded" "$GPUS" <<'EOF' \
    || fail "the node agent could not read the GPUs through NVML"
import json, pathlib, re, socket, sys
reports, where, gpus = json.load(open(sys.argv[1])), pathlib.Path(sys.argv[2]), int(sys.argv[3])
for report in reports:
    reading = report["reading"]
    if not reading["nvml_available"]:
        sys.exit(f"NVML unavailable: {reading['error']}")
    if len(reading["gpus"]) != gpus:
        sys.exit(f"NVML gave {len(reading['gpus'])} GPUs, nvidia-smi lists {gpus}")
    model = reading["gpus"][0]["model"] if reading["gpus"] else "no-gpu"
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{socket.gethostname()}-{model}")
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"recorded {where / name}.json")
    for c in report["conditions"]:
        print(f"  {c['type']:<17} {c['status']:<8} {c['reason']:<26} {c['message']}")
EOF
say "pytest tests/health/test_fixtures.py   # the recorded readings give the same conditions"
python -m pytest -q -p no:cacheprovider "$ROOT/tests/health/test_fixtures.py" \
    || fail "the recorded readings do not give the conditions the agent gave"

# The allreduce sweep (kiban health sweep) on NCCL: one virtual node per GPU, each with a GPU
# of its own (kiban up --nodes N --gpus-per-node 1 gives node i the machine's GPU i when it has
# N GPUs). Its own kiban up and home, stopped before the one-node platform below starts.
if ((GPUS >= 2)); then
    say "scripts/sweep-check.sh nccl     # $GPUS virtual nodes of 1 GPU each, NCCL across them"
    scripts/sweep-check.sh nccl "$KIBAN_HOME/sweep-nccl" || fail "the allreduce sweep on NCCL"
else
    echo "allreduce sweep on NCCL: SKIPPED: this machine has $GPUS GPU; NCCL needs a GPU of its" \
        "own for each rank (it refuses two ranks on one GPU) and a sweep needs 2 nodes or more"
    say "scripts/sweep-check.sh gloo     # the same sweep on 2 CPU nodes: the plumbing checked"
    scripts/sweep-check.sh gloo "$KIBAN_HOME/sweep-gloo" || fail "the allreduce sweep on gloo"
fi

say "kiban up --port 0 &     # one node: this machine, its GPUs counted by NVML"
kiban up --home "$KIBAN_HOME" --port 0 2>"$KIBAN_HOME/server.log" &
SERVER=$!
stop() {  # replicas outlive a restart of kiban (as jobs do): delete the service first
    if kiban delete service chat >/dev/null 2>&1; then
        for _ in $(seq 1 150); do
            [[ "$(kiban services -o json)" == "[]" ]] && break
            sleep 0.2
        done
    fi
    kill -TERM "$SERVER" 2>/dev/null
    wait "$SERVER" 2>/dev/null || true
}
trap stop EXIT
wait_for_kiban "$SERVER" 30 || fail "kiban up exited or did not answer within 30 s"
say "kiban nodes"
kiban nodes
say "curl <node agent>/metrics     # kiban up's node agent: GPU telemetry under DCGM's names"
AGENT=""
for _ in $(seq 1 150); do
    AGENT=$(grep -o 'serving http://[^ ]*/metrics' "$KIBAN_HOME/server.log" | head -n 1 | cut -d' ' -f2)
    [[ -n "$AGENT" ]] && curl -sS "$AGENT" | grep -q '^DCGM_FI_DEV_GPU_TEMP{' && break
    sleep 0.2
done
[[ -n "$AGENT" ]] || fail "kiban up started no node agent"
curl -sS "$AGENT" | grep -E '^(DCGM_FI_DEV_(GPU_TEMP|FB_USED|POWER_USAGE)|kiban_agent_check_status)' \
    || fail "the node agent serves no GPU telemetry"
kiban nodes -o json > "$KIBAN_HOME/nodes.json"
python - "$KIBAN_HOME/nodes.json" "$GPUS" <<'EOF' || fail "kiban nodes does not count the GPUs nvidia-smi lists"
import json, sys
nodes = json.load(open(sys.argv[1]))
total = sum(int(node["gpus"]) for node in nodes)
print(f"GPUs kiban found: {total}; nvidia-smi: {sys.argv[2]}")
sys.exit(0 if total == int(sys.argv[2]) else 1)
EOF

PROBE='import torch; print("cuda devices seen:", torch.cuda.device_count())'
seen() {  # seen GPUS: run the probe as a job with GPUS GPUs, print what it saw
    local job
    job=$(kiban run --gpus "$1" -- python -c "$PROBE")
    kiban logs -f "$job" >"$KIBAN_HOME/probe-$1.log"
    kiban wait "$job" >/dev/null
    grep -o 'seen: [0-9]*' "$KIBAN_HOME/probe-$1.log" || true
}
say "kiban run --gpus 0 -- python -c '$PROBE'; kiban logs -f JOB"
NO_GPU=$(seen 0); echo "$NO_GPU"
[[ "$NO_GPU" == "seen: 0" ]] || fail "a job with no GPU saw: ${NO_GPU:-nothing}"
say "kiban run --gpus 1 -- python -c '$PROBE'; kiban logs -f JOB"
ONE_GPU=$(seen 1); echo "$ONE_GPU"
[[ "$ONE_GPU" == "seen: 1" ]] || fail "a job with one GPU saw: ${ONE_GPU:-nothing}"

say "kiban submit mnist-ddp (1 replica x 1 GPU, torchrun, 3 epochs)"
cat > "$KIBAN_HOME/job.yaml" <<EOF
apiVersion: kiban/v1
kind: Job
metadata: {name: mnist-gpu}
spec:
  queue: default
  launcher: torchrun
  workingDir: $ROOT/examples/mnist-ddp
  tasks:
    - name: worker
      replicas: 1
      resources: {gpu: 1, cpu: 2, memory: 4Gi}
      command: [python, train.py, --epochs, "3"]
EOF
JOB=$(kiban submit "$KIBAN_HOME/job.yaml")
kiban logs -f "$JOB" | tee "$KIBAN_HOME/train.log"
kiban wait "$JOB"
grep -q 'backend nccl' "$KIBAN_HOME/train.log" || fail "the job did not train with NCCL"
grep -q 'device cuda' "$KIBAN_HOME/train.log" || fail "the job did not train on the GPU"

say "a tiny random chat model into the model cache, served on one GPU"
python -c "from kiban.testing.models import build_tiny_causal_lm as b; from pathlib import Path; \
b(Path('$KIBAN_HOME/models/tiny'))" >/dev/null
cat > "$KIBAN_HOME/chat.yaml" <<EOF
apiVersion: kiban/v1
kind: Service
metadata: {name: chat}
spec:
  queue: default
  model: {name: tiny, storageUri: "file://$KIBAN_HOME/models/tiny", task: text_generation}
  resources: {gpu: 1, cpu: 2, memory: 4Gi}
  minReplicas: 1
  maxReplicas: 1
EOF
URL=$(kiban serve --wait "$KIBAN_HOME/chat.yaml")
echo "URL=$URL"
AUTH="Authorization: Bearer $(cat "$KIBAN_HOME/token")"
say "curl \$URL/openai/v1/chat/completions (streamed)"
curl -sS --fail-with-body -N -H "$AUTH" -H 'Content-Type: application/json' \
    -d '{"model": "tiny", "stream": true, "max_tokens": 16, "messages": [{"role": "user", "content": "Hello"}]}' \
    "$URL/openai/v1/chat/completions" | tee "$KIBAN_HOME/stream.txt" | tail -n 3
grep -q 'data: \[DONE\]' "$KIBAN_HOME/stream.txt" || fail "the stream did not end with [DONE]"
say "64 concurrent completions of 32 tokens, batched on the GPU"
python - "$URL" "$(cat "$KIBAN_HOME/token")" <<'EOF' || fail "concurrent completions"
import concurrent.futures, sys, time, httpx
url, token = sys.argv[1], sys.argv[2]
body = {"model": "tiny", "prompt": "the quick brown fox", "max_tokens": 32, "temperature": 0}
with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=120) as client:
    def one(_: int) -> int:
        r = client.post(f"{url}/openai/v1/completions", json=body)
        r.raise_for_status()
        return int(r.json()["usage"]["completion_tokens"])
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        tokens = sum(pool.map(one, range(64)))
    wall = time.perf_counter() - start
print(f"64 requests, {tokens} tokens in {wall:.2f} s: {tokens / wall:.0f} tokens/s")
EOF
say "kiban describe service chat"
kiban describe service chat
REPLICA_LOG=$(grep -rl 'model tiny ready' "$KIBAN_HOME" 2>/dev/null | head -n 1 || true)
[[ -n "$REPLICA_LOG" ]] || fail "no replica log says the model is ready"
grep -h 'model tiny ready' "$REPLICA_LOG"
grep -q 'ready: .* on cuda' "$REPLICA_LOG" || fail "the model was not loaded on the GPU"
echo "gpu-check: ok"
