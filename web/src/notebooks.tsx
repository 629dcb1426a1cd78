/** Notebooks: the user's JupyterLab sessions, a start form, open links and stop buttons. */
import { useEffect, useState } from "preact/hooks";
import { getJson, send } from "./api";
import { ErrorLine, FieldErrors, Loaded, OtherErrors, StateBadge, problemsOf } from "./components";
import { clock, duration, relative } from "./format";
import { useLive } from "./live";
import { maySubmit, useWhoAmI } from "./session";
import type { Notebook, Queue } from "./types";

const FIELDS = ["name", "gpus", "idleTimeout", "queue", "spec.queue"];

/** A timeout as the API gives it (seconds) or as typed ("1h"). */
function span(value: number | string | null): string {
  if (value === null) return "—";
  return typeof value === "number" ? duration(value) : value;
}

export function NotebooksPage() {
  const live = useLive(() => getJson<Notebook[]>("/api/v1/notebooks"), []);
  const acts = maySubmit(useWhoAmI()); // a viewer starts and stops nothing
  const [stopError, setStopError] = useState<unknown>(undefined);

  /** Stop a notebook, or start a stopped one again (its directory was kept). */
  async function act(nb: Notebook, what: "stop" | "start"): Promise<void> {
    setStopError(undefined);
    try {
      if (what === "stop") await send("POST", `/api/v1/notebooks/${encodeURIComponent(nb.name)}/stop`);
      else await send("POST", "/api/v1/notebooks", { name: nb.name });
    } catch (e) {
      setStopError(e);
    }
    live.refresh();
  }

  return (
    <section>
      <h2>Notebooks</h2>
      {acts ? <StartForm started={live.refresh} /> : null}
      <ErrorLine error={stopError} />
      <Loaded data={live.data} error={live.error}>
        {(notebooks) => (
          <table data-testid="notebooks-table">
            <thead>
              <tr>
                <th>Name</th>
                <th>State</th>
                <th class="num">GPUs</th>
                <th>Queue</th>
                <th>Idle timeout</th>
                <th>Max lifetime</th>
                <th>Last activity</th>
                <th>Job</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {notebooks.map((nb) => (
                <tr data-testid="notebook-row" data-notebook={nb.name} data-state={nb.state} key={nb.name}>
                  <td class="nowrap">{nb.name}</td>
                  <td>
                    <StateBadge state={nb.state} />
                    {nb.reason ? <span class="muted"> {nb.reason}</span> : null}
                  </td>
                  <td class="num">{nb.gpus}</td>
                  <td class="nowrap">{nb.queue}</td>
                  <td>{span(nb.idleTimeout)}</td>
                  <td>{span(nb.maxLifetime)}</td>
                  <td title={clock(nb.lastActivity)}>{relative(nb.lastActivity)}</td>
                  <td class="nowrap">{nb.jobId ? <a href={`/jobs/${encodeURIComponent(nb.jobId)}`} class="mono">{nb.jobId}</a> : "—"}</td>
                  <td>
                    <div class="actions-cell">
                      {nb.state === "Running" ? (
                        <a class="button" data-testid="notebook-open" href={nb.url} target="_blank" rel="noopener">
                          Open
                        </a>
                      ) : null}
                      {!acts ? null : nb.state === "Running" || nb.state === "Starting" ? (
                        <button type="button" data-testid="notebook-stop" onClick={() => void act(nb, "stop")}>
                          Stop
                        </button>
                      ) : (
                        <button type="button" data-testid="notebook-restart" onClick={() => void act(nb, "start")}>
                          Start again
                        </button>
                      )}
                    </div>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Loaded>
      {live.data && live.data.length === 0 ? <p class="muted">No notebooks yet: start one above.</p> : null}
    </section>
  );
}

function StartForm({ started }: { started: () => void }) {
  const [name, setName] = useState("");
  const [gpus, setGpus] = useState("1");
  const [idle, setIdle] = useState("1h");
  const [queue, setQueue] = useState("");
  const [queues, setQueues] = useState<Queue[]>([]);

  // the user's queues, offered in a list; theirs filled in ("default" if they may use it)
  useEffect(() => {
    getJson<Queue[]>("/api/v1/queues").then(
      (qs) => {
        setQueues(qs);
        const pick = qs.find((q) => q.name === "default") ?? qs[0];
        if (pick) setQueue((current) => current || pick.name);
      },
      () => setQueues([]),
    );
  }, []);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const problems = problemsOf(error);

  async function start(event: Event): Promise<void> {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    const body: Record<string, unknown> = { name: name.trim() };
    if (gpus.trim()) body["gpus"] = /^\d+$/.test(gpus.trim()) ? Number(gpus) : gpus;
    if (idle.trim()) body["idleTimeout"] = idle.trim();
    if (queue.trim()) body["queue"] = queue.trim();
    try {
      await send("POST", "/api/v1/notebooks", body);
      started();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  }

  return (
    <form class="card form inline-form" onSubmit={(e) => void start(e)}>
      <label>
        Name
        <input data-testid="notebook-name" value={name} placeholder="scratch" onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        <FieldErrors problems={problems} field="name" />
      </label>
      <label>
        GPUs
        <input data-testid="notebook-gpus" value={gpus} inputmode="numeric" onInput={(e) => setGpus((e.target as HTMLInputElement).value)} />
        <FieldErrors problems={problems} field="gpus" />
      </label>
      <label>
        Idle timeout
        <input data-testid="notebook-idle-timeout" value={idle} placeholder="1h" onInput={(e) => setIdle((e.target as HTMLInputElement).value)} />
        <FieldErrors problems={problems} field="idleTimeout" />
      </label>
      <label>
        Queue
        <input data-testid="notebook-queue" value={queue} list="notebook-queues" onInput={(e) => setQueue((e.target as HTMLInputElement).value)} />
        <datalist id="notebook-queues">
          {queues.map((q) => (
            <option value={q.name}>{q.tenant}</option>
          ))}
        </datalist>
        <FieldErrors problems={problems} field="queue" />
        <FieldErrors problems={problems} field="spec.queue" />
      </label>
      <button type="submit" class="primary" data-testid="notebook-start" disabled={busy}>
        {busy ? "Starting…" : "Start notebook"}
      </button>
      <OtherErrors error={error} shown={(f) => FIELDS.includes(f)} testid="notebook-error" />
    </form>
  );
}
