/** One job: state, reason and ETA, its spec, placement on nodes and topology blocks, events,
 * live logs per rank, and cancel / checkpoint / resubmit. */
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, getJson, pause, readText, request, send } from "./api";
import { ErrorLine, StateBadge } from "./components";
import { clock, relative, yamlish } from "./format";
import { LIVE_INTERVAL_MS, useLive } from "./live";
import { navigate } from "./router";
import { mayManageJob, maySubmit, useWhoAmI } from "./session";
import { TERMINAL_STATES, type Job, type JobEvent, type Node, type Replica } from "./types";

/** Labels that name a node's topology block, broadest first (OCI's RDMA labels, then k8s'). */
const BLOCK_LABELS = [
  "oci.oraclecloud.com/rdma.hpc_island_id",
  "oci.oraclecloud.com/rdma.network_block_id",
  "oci.oraclecloud.com/rdma.local_block_id",
  "topology.kubernetes.io/zone",
];

export function JobPage({ id }: { id: string }) {
  const path = `/api/v1/jobs/${encodeURIComponent(id)}`;
  const job = useLive(() => getJson<Job>(path), [path]);
  const events = useLive(() => getJson<JobEvent[]>(`${path}/events`), [path]);
  if (job.error instanceof ApiError && job.error.status === 404) {
    return (
      <section data-testid="not-found">
        <h2>Job not found</h2>
        <p>
          There is no job <code>{id}</code> that you may see. <a href="/jobs">All jobs</a>
        </p>
      </section>
    );
  }
  if (!job.data) return job.error ? <ErrorLine error={job.error} /> : <p class="muted">Loading…</p>;
  const j = job.data;
  return (
    <section>
      <h2 data-testid="job-title">
        {j.name} <span class="mono muted">{j.id}</span>
      </h2>
      <ErrorLine error={job.error} />
      <Summary job={j} />
      <Actions job={j} refresh={job.refresh} />
      <div class="grid2">
        <div class="card">
          <h3>Placement</h3>
          <Placement job={j} />
        </div>
        <div class="card">
          <h3>Events</h3>
          <ol data-testid="job-events" class="events">
            {(events.data ?? []).map((e) => (
              <li data-testid="job-event" class={e.type === "Warning" ? "warning" : ""} key={e.id}>
                <time title={clock(e.at)}>{relative(e.at)}</time> <strong>{e.reason}</strong> {e.message}
              </li>
            ))}
          </ol>
        </div>
        <div class="card span2">
          <h3>Logs</h3>
          <Logs job={j} />
        </div>
        <div class="card span2">
          <h3>Spec</h3>
          <pre data-testid="job-spec" class="spec">
            {yamlish(j.spec ?? {}).trimStart()}
          </pre>
        </div>
      </div>
    </section>
  );
}

function Summary({ job }: { job: Job }) {
  return (
    <dl class="summary card">
      <dt>State</dt>
      <dd>
        <StateBadge state={job.state} testid="job-state" />
        {job.message ? <span class="muted"> {job.message}</span> : null}
      </dd>
      <dt>Reason</dt>
      <dd data-testid="job-reason">{job.reason ? `${job.reason.code}: ${job.reason.message}` : "—"}</dd>
      <dt>ETA</dt>
      <dd data-testid="job-eta" title={clock(job.eta)}>
        {job.eta ? relative(job.eta) : "—"}
      </dd>
      <dt>Position</dt>
      <dd>
        {job.queuePosition ?? "—"} in queue{job.clusterPosition ? `, ${job.clusterPosition} in cluster` : ""}
      </dd>
      <dt>Queue</dt>
      <dd>
        {job.queue} <span class="muted">({job.tenant})</span>
      </dd>
      <dt>GPUs</dt>
      <dd>
        {job.gpus} over {job.replicaCount} replica{job.replicaCount === 1 ? "" : "s"}
      </dd>
      <dt>Submitted</dt>
      <dd title={clock(job.submittedAt)}>
        {relative(job.submittedAt)}
        {job.submittedBy ? ` by ${job.submittedBy}` : ""}
      </dd>
      <dt>Started</dt>
      <dd title={clock(job.startedAt)}>{relative(job.startedAt)}</dd>
      <dt>Checkpoint</dt>
      <dd title={clock(job.lastCheckpointAt)}>{relative(job.lastCheckpointAt)}</dd>
    </dl>
  );
}

function Actions({ job, refresh }: { job: Job; refresh: () => void }) {
  const who = useWhoAmI();
  const [error, setError] = useState<unknown>(undefined);
  const [busy, setBusy] = useState(false);
  const base = `/api/v1/jobs/${encodeURIComponent(job.id)}`;
  const ended = TERMINAL_STATES.has(job.state);

  async function act(what: () => Promise<void>): Promise<void> {
    setBusy(true);
    setError(undefined);
    try {
      await what();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
      refresh();
    }
  }

  const resubmit = async (): Promise<void> => {
    const spec = job.spec ?? {};
    const manifest = "apiVersion" in spec ? spec : { apiVersion: "kiban/v1", kind: "Job", metadata: { name: job.name }, spec };
    const created = await send<Job>("POST", "/api/v1/jobs", manifest);
    navigate(`/jobs/${encodeURIComponent(created.id)}`);
  };

  if (!maySubmit(who)) return null; // a viewer: nothing to do here
  const manages = mayManageJob(who, job.submittedBy);
  return (
    <div class="actions" data-testid="job-actions">
      <button
        type="button"
        class="danger"
        data-testid="job-cancel"
        disabled={busy || ended || !manages}
        title={manages ? undefined : `submitted by ${job.submittedBy ?? "someone else"}: its submitter or a tenant-admin may cancel it`}
        onClick={() => void act(async () => void (await send("POST", `${base}/cancel`)))}
      >
        Cancel
      </button>
      <button type="button" data-testid="job-checkpoint" disabled={busy || !manages || job.state !== "Running"} onClick={() => void act(async () => void (await send("POST", `${base}/checkpoint`)))}>
        Checkpoint
      </button>
      <button type="button" data-testid="job-resubmit" disabled={busy || !job.spec} onClick={() => void act(resubmit)}>
        Resubmit
      </button>
      <ErrorLine error={error} />
    </div>
  );
}

function blockLabel(job: Job, nodes: Node[]): string | null {
  const inner = (job.spec?.["spec"] ?? job.spec ?? {}) as Record<string, unknown>;
  const topology = (inner["topology"] ?? null) as { level?: string } | null;
  if (topology?.level) return topology.level;
  return BLOCK_LABELS.find((label) => nodes.some((n) => label in n.labels)) ?? null;
}

function Placement({ job }: { job: Job }) {
  const [nodes, setNodes] = useState<Node[]>([]);
  const replicas = job.replicas ?? [];
  const placed = replicas.filter((r) => r.node);
  useEffect(() => {
    if (placed.length === 0) return;
    getJson<Node[]>("/api/v1/nodes").then(setNodes, () => setNodes([]));
  }, [placed.length]);
  if (placed.length === 0) {
    return (
      <div data-testid="job-placement">
        <p class="muted">Not placed yet{job.reason ? `: ${job.reason.message}` : "."}</p>
      </div>
    );
  }
  const label = blockLabel(job, nodes);
  const byNode = new Map<string, Replica[]>();
  for (const r of placed) byNode.set(r.node, [...(byNode.get(r.node) ?? []), r]);
  const byBlock = new Map<string, string[]>();
  for (const node of byNode.keys()) {
    const info = nodes.find((n) => n.name === node);
    const block = label ? info?.labels[label] ?? "(no label)" : "";
    byBlock.set(block, [...(byBlock.get(block) ?? []), node]);
  }
  return (
    <div data-testid="job-placement" class="placement">
      {[...byBlock.entries()].map(([block, names]) => (
        <div class="block" key={block}>
          {label ? (
            <div class="block-name">
              {label.split("/").pop()}: <strong>{block}</strong>
            </div>
          ) : null}
          <div class="nodes">
            {names.map((name) => {
              const info = nodes.find((n) => n.name === name);
              const used = new Set((byNode.get(name) ?? []).flatMap((r) => r.gpuIds));
              const gpuCount = Math.max(info?.gpus ?? 0, ...[...used].map((g) => g + 1));
              return (
                <div class="placement-node" data-testid="placement-node" data-node={name} key={name}>
                  <div class="node-name">{name}</div>
                  <div class="gpus">
                    {Array.from({ length: gpuCount }, (_, g) => (
                      <span class={`gpu ${used.has(g) ? "mine" : ""}`} title={`GPU ${g}`} />
                    ))}
                  </div>
                  <ul>
                    {(byNode.get(name) ?? []).map((r) => (
                      <li>
                        {r.task}[{r.index}] rank {r.rank} · {r.state}
                        {r.gpuIds.length ? ` · GPUs ${r.gpuIds.join(",")}` : ""}
                      </li>
                    ))}
                  </ul>
                </div>
              );
            })}
          </div>
        </div>
      ))}
    </div>
  );
}

/** Most text the log view keeps (the start is dropped first); the API keeps the whole log. */
const LOG_KEEP = 1 << 20;

function Logs({ job }: { job: Job }) {
  const placed = [...new Set((job.replicas ?? []).map((r) => r.rank))].sort((a, b) => a - b);
  const ranks = placed.length ? placed : Array.from({ length: Math.max(1, job.replicaCount) }, (_, r) => r);
  const [rank, setRank] = useState(0);
  const [text, setText] = useState("");
  const [status, setStatus] = useState<unknown>(undefined);
  const pre = useRef<HTMLPreElement>(null);
  const stick = useRef(true); // follow the end of the log unless the user scrolled up
  const started = job.state !== "Pending";

  useEffect(() => {
    if (!started) return;
    const abort = new AbortController();
    const jobPath = `/api/v1/jobs/${encodeURIComponent(job.id)}`;
    let received = 0; // bytes of the log so far: a dropped stream resumes from there
    setText("");
    setStatus(undefined);
    const append = (piece: string, bytes: number): void => {
      received += bytes;
      setText((t) => {
        const next = t + piece;
        return next.length > LOG_KEEP ? next.slice(next.length - LOG_KEEP) : next;
      });
    };
    const follow = async (): Promise<void> => {
      while (!abort.signal.aborted) {
        try {
          const res = await request("GET", `${jobPath}/logs?rank=${rank}&follow=true&offset=${received}`, { signal: abort.signal });
          setStatus(undefined);
          await readText(res, append);
        } catch (e) {
          if (abort.signal.aborted) return;
          setStatus(e);
          if (e instanceof ApiError && e.status < 500 && e.status !== 429) return; // asking again changes nothing
        }
        // the stream ended: with the job, or because the connection dropped while it runs
        const now = await getJson<Job>(jobPath).catch(() => null);
        if (!now || TERMINAL_STATES.has(now.state)) return;
        await pause(LIVE_INTERVAL_MS, abort.signal);
      }
    };
    void follow();
    return () => abort.abort();
  }, [job.id, rank, started, job.attempt]);

  useEffect(() => {
    const el = pre.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, [text]);

  return (
    <div>
      <label class="inline">
        Rank{" "}
        <select data-testid="job-logs-rank" value={String(rank)} onChange={(e) => setRank(Number((e.target as HTMLSelectElement).value))}>
          {ranks.map((r) => (
            <option value={String(r)}>{r}</option>
          ))}
        </select>
      </label>
      <ErrorLine error={status} />
      <pre
        data-testid="job-logs"
        class={started ? "logs" : "logs waiting"}
        ref={pre}
        onScroll={(e) => {
          const el = e.currentTarget;
          stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
        }}
      >
        {started ? text : "The job has not started; its logs appear here when it does."}
      </pre>
    </div>
  );
}
