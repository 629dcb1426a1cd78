#!/usr/bin/env bash
# The allreduce sweep end to end, each step a command a user would type: kiban up with virtual
# nodes, kiban health sweep --wait over them, each node's bus bandwidth printed, and the result
# recorded as each node's baseline (a second sweep is judged against the first's figures, and
# kiban describe node shows the condition AllreduceDegraded). Prints "sweep-check: ok" or fails.
#   nccl: one virtual node per GPU of this machine, each with its own GPU (needs 2 or more: NCCL
#         gives each rank a GPU of its own and refuses two ranks on one GPU);
#   gloo: two virtual CPU nodes, the same plumbing on any machine.
# Usage: scripts/sweep-check.sh nccl|gloo [DIR]   (DIR keeps the logs; default a new temporary one)
# KIBAN_SWEEP_SIZE_MB and KIBAN_SWEEP_ITERS: the all_reduce tensor and timed iterations.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/kiban-up.sh
fail() { echo "sweep-check: FAILED: $*" >&2; exit 1; }
say() { printf '\n$ %s\n' "$*" >&2; }

BACKEND="${1:-}"
case "$BACKEND" in
    nccl)
        GPUS=$(nvidia-smi -L | grep -c '^GPU ' || true)
        ((GPUS >= 2)) || fail "nccl needs 2 or more GPUs (one per rank); this machine has $GPUS"
        NODES=$GPUS
        GPUS_PER_NODE=1
        SIZE_MB="${KIBAN_SWEEP_SIZE_MB:-256}"  # large enough for NVLink's bandwidth to show
        ITERS="${KIBAN_SWEEP_ITERS:-20}"
        ;;
    gloo)
        NODES=2
        GPUS_PER_NODE=0
        SIZE_MB="${KIBAN_SWEEP_SIZE_MB:-16}"
        ITERS="${KIBAN_SWEEP_ITERS:-10}"
        ;;
    *)
        echo "usage: scripts/sweep-check.sh nccl|gloo [DIR]" >&2
        exit 2
        ;;
esac
export KIBAN_HOME="${2:-$(mktemp -d /tmp/kiban-sweep.XXXXXX)}"
mkdir -p "$KIBAN_HOME"
say "kiban up --port 0 --nodes $NODES --gpus-per-node $GPUS_PER_NODE --sweep-every 0 &"
kiban up --home "$KIBAN_HOME" --port 0 --nodes "$NODES" --gpus-per-node "$GPUS_PER_NODE" \
    --sweep-every 0 --no-node-agent 2>"$KIBAN_HOME/server.log" &
SERVER=$!
stop() {  # replicas outlive a restart of kiban (as jobs do): cancel unfinished sweep jobs first
    if [[ -s "$KIBAN_HOME/sweep-jobs" ]]; then
        local job
        while read -r job; do
            kiban cancel "$job" >/dev/null 2>&1 || true
        done <"$KIBAN_HOME/sweep-jobs"
    fi
    kill -TERM "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
}
trap stop EXIT
wait_for_kiban "$SERVER" 60 || fail "kiban up exited or did not answer within 60 s"
say "kiban nodes"
kiban nodes

sweep() {  # sweep N: one sweep of the idle nodes, its answer kept as sweep-N.json
    say "kiban health sweep --wait --size-mb $SIZE_MB --iters $ITERS -o json"
    kiban health sweep --wait --size-mb "$SIZE_MB" --iters "$ITERS" -o json \
        >"$KIBAN_HOME/sweep-$1.json" || fail "kiban health sweep --wait failed"
    python -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["jobs"]))' \
        "$KIBAN_HOME/sweep-$1.json" >>"$KIBAN_HOME/sweep-jobs"
    local job
    job=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["jobs"][0])' \
        "$KIBAN_HOME/sweep-$1.json") || fail "the sweep started no job"
    say "kiban logs $job     # rank 0's result line"
    kiban logs "$job" >"$KIBAN_HOME/sweep-$1.log"
    grep '^KIBAN_ALLREDUCE_RESULT ' "$KIBAN_HOME/sweep-$1.log" | tail -n 1 \
        || fail "the sweep job's log has no result line"
}

# judge N: the sweep's answer measured every node on BACKEND with busbw > 0, printed per node;
# from the second sweep on, each node's baseline is the figure the first recorded
judge() {
    python - "$KIBAN_HOME" "$1" "$BACKEND" "$NODES" <<'EOF' || fail "the sweep's figures"
import json, pathlib, sys
home, n, backend, nodes = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
answer = json.loads((home / f"sweep-{n}.json").read_text())
log = (home / f"sweep-{n}.log").read_text().splitlines()
line = [x for x in log if x.startswith("KIBAN_ALLREDUCE_RESULT ")][-1]
result = json.loads(line.split(" ", 1)[1])
if result["backend"] != backend:
    sys.exit(f"the sweep ran on {result['backend']}, not {backend}")
if result["world_size"] != nodes:
    sys.exit(f"the sweep had {result['world_size']} ranks, not {nodes} (one per node)")
measured = {f["name"]: f for f in answer["results"]["nodes"]}
if len(measured) != nodes:
    sys.exit(f"{len(measured)} nodes measured, not {nodes}: {sorted(measured)}")
first = {}
if n > 1:
    first = {f["name"]: f for f in json.loads((home / "sweep-1.json").read_text())["results"]["nodes"]}
print(f"sweep {n} on {backend}, {result['size_bytes'] / 1e6:g} MB x {result['iters']} all_reduces:")
for name, f in sorted(measured.items()):
    print(f"  {name}: busbw {f['busbw']:.3f} GB/s, baseline {f['baseline']:.3f} GB/s "
          f"({f['fraction']:.0%}), degraded: {'yes' if f['degraded'] else 'no'}")
    if not f["busbw"] > 0:
        sys.exit(f"{name}: busbw {f['busbw']} is not above 0")
    want = first[name]["busbw"] if first else f["busbw"]  # the first sweep is its own baseline
    if abs(f["baseline"] - want) > 1e-9 * max(want, 1.0):
        sys.exit(f"{name}: baseline {f['baseline']} is not the recorded {want}")
EOF
}

sweep 1
judge 1
sweep 2
judge 2

say "kiban describe node node-0 -o json     # the sweep's condition, recorded on the node"
kiban describe node node-0 -o json >"$KIBAN_HOME/node-0.json"
python - "$KIBAN_HOME/node-0.json" "$KIBAN_HOME/sweep-2.json" <<'EOF' \
    || fail "node-0's condition AllreduceDegraded does not say what the sweep measured"
import json, sys
node, answer = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
(c,) = [c for c in node["health"]["conditions"] if c["type"] == "AllreduceDegraded"]
print(f"  {c['type']} {c['status']} {c['reason']}: {c['message']}")
(mine,) = [f for f in answer["results"]["nodes"] if f["name"] == "node-0"]
block_degraded = any(b["degraded"] for b in answer["results"]["blocks"])
# True when the node or its block fell below the fraction of its baseline (load can do that)
expected = "True" if mine["degraded"] or block_degraded else "False"
sys.exit(0 if c["status"] == expected and "baseline" in c["message"] else 1)
EOF
echo "sweep-check: ok ($BACKEND)"
