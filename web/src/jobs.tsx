/** Jobs: one page of 50 from the API (never the whole store), filters kept in the URL,
 * refreshed every 2 s. */
import { useEffect, useState } from "preact/hooks";
import { getPage, q } from "./api";
import { Loaded, StateBadge } from "./components";
import { relative } from "./format";
import { useLive } from "./live";
import { navigate } from "./router";
import { maySubmit, useWhoAmI } from "./session";
import { JOB_STATES, type Job } from "./types";

export const PAGE_SIZE = 50;

interface Filters {
  state: string;
  queue: string;
  name: string;
  reason: string;
  offset: number;
}

function filtersOf(query: URLSearchParams): Filters {
  const offset = Number(query.get("offset") ?? 0);
  return {
    state: query.get("state") ?? "",
    queue: query.get("queue") ?? "",
    name: query.get("name") ?? "",
    reason: query.get("reason") ?? "",
    offset: Number.isInteger(offset) && offset > 0 ? offset : 0,
  };
}

function urlOf(f: Filters): string {
  return `/jobs${q({ state: f.state, queue: f.queue, name: f.name, reason: f.reason, offset: f.offset || undefined })}`;
}

export function JobsPage({ query }: { query: URLSearchParams }) {
  const who = useWhoAmI();
  const filters = filtersOf(query);
  // the text inputs keep their own value; the URL (and the fetch) follow after a pause in typing
  const [queueText, setQueueText] = useState(filters.queue);
  const [nameText, setNameText] = useState(filters.name);
  const set = (change: Partial<Filters>): void => navigate(urlOf({ ...filters, offset: 0, ...change }), true);

  useEffect(() => {
    const timer = window.setTimeout(() => {
      const now = filtersOf(new URLSearchParams(location.search)); // the URL may have moved on
      const queue = queueText.trim();
      const name = nameText.trim();
      if (queue !== now.queue || name !== now.name) navigate(urlOf({ ...now, offset: 0, queue, name }), true);
    }, 300);
    return () => window.clearTimeout(timer);
  }, [queueText, nameText]);

  // a link to /jobs?queue=... while on this page: the inputs show what the URL filters by
  useEffect(() => setQueueText((t) => (t.trim() === filters.queue ? t : filters.queue)), [filters.queue]);
  useEffect(() => setNameText((t) => (t.trim() === filters.name ? t : filters.name)), [filters.name]);

  const api = `/api/v1/jobs${q({
    state: filters.state,
    queue: filters.queue,
    name: filters.name,
    reason: filters.reason,
    offset: filters.offset,
    limit: PAGE_SIZE,
  })}`;
  // the page remembers its own offset: until the next page arrives, the last one shows as itself
  const live = useLive(async () => ({ ...(await getPage<Job>(api)), offset: filters.offset }), [api]);

  return (
    <section>
      <h2>Jobs</h2>
      <div class="filters">
        <label>
          State
          <select data-testid="jobs-filter-state" value={filters.state} onChange={(e) => set({ state: (e.target as HTMLSelectElement).value })}>
            <option value="">any</option>
            {JOB_STATES.map((s) => (
              <option value={s}>{s}</option>
            ))}
          </select>
        </label>
        <label>
          Queue
          <input data-testid="jobs-filter-queue" value={queueText} placeholder="any" onInput={(e) => setQueueText((e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Name
          <input data-testid="jobs-filter-name" value={nameText} placeholder="any" onInput={(e) => setNameText((e.target as HTMLInputElement).value)} />
        </label>
        {filters.reason ? (
          <span class="chip">
            reason: {filters.reason}{" "}
            <button type="button" class="link" onClick={() => set({ reason: "" })} aria-label="clear the reason filter">
              ×
            </button>
          </span>
        ) : null}
        {maySubmit(who) ? (
          <a class="button" href="/submit" data-testid="jobs-submit">
            Submit a job
          </a>
        ) : null}
      </div>
      <Loaded data={live.data} error={live.error}>
        {(page) => (
          <>
            <JobsTable jobs={page.items} />
            <Pager offset={page.offset} count={page.items.length} total={page.total} go={(offset) => navigate(urlOf({ ...filters, offset }))} />
          </>
        )}
      </Loaded>
    </section>
  );
}

function JobsTable({ jobs }: { jobs: Job[] }) {
  const now = Date.now() / 1000;
  return (
    <table data-testid="jobs-table" class="jobs">
      <thead>
        <tr>
          <th>Job</th>
          <th>Name</th>
          <th>Tenant</th>
          <th>Queue</th>
          <th>State</th>
          <th class="num">GPUs</th>
          <th>Reason</th>
          <th>ETA</th>
          <th class="num">Position</th>
          <th>Submitted</th>
        </tr>
      </thead>
      <tbody>
        {jobs.map((job) => (
          <tr data-testid="job-row" data-job-id={job.id} data-state={job.state} key={job.id}>
            <td>
              <a href={`/jobs/${encodeURIComponent(job.id)}`} class="mono">
                {job.id}
              </a>
            </td>
            <td>{job.name}</td>
            <td>{job.tenant}</td>
            <td data-testid="job-queue">{job.queue}</td>
            <td>
              <StateBadge state={job.state} testid="job-state" />
            </td>
            <td class="num">{job.gpus}</td>
            <td data-testid="job-reason" title={job.reason?.message ?? ""}>
              {job.reason ? job.reason.code : ""}
            </td>
            <td data-testid="job-eta" title={job.eta ? new Date(job.eta * 1000).toLocaleString() : ""}>
              {job.eta ? relative(job.eta, now) : ""}
            </td>
            <td class="num" data-testid="job-position">
              {job.queuePosition ?? ""}
              {job.clusterPosition !== null && job.clusterPosition !== undefined ? <span class="muted"> ({job.clusterPosition} in cluster)</span> : null}
            </td>
            <td title={new Date(job.submittedAt * 1000).toLocaleString()}>{relative(job.submittedAt, now)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Pager({ offset, count, total, go }: { offset: number; count: number; total: number | null; go: (offset: number) => void }) {
  const first = count ? offset + 1 : 0;
  // without a total, a full page may have more behind it
  const more = total === null ? count === PAGE_SIZE : offset + count < total;
  return (
    <div class="pager">
      <button type="button" data-testid="jobs-prev" disabled={offset === 0} onClick={() => go(Math.max(0, offset - PAGE_SIZE))}>
        ← Newer
      </button>
      <span data-testid="jobs-total" data-total={total ?? ""}>
        {first}–{offset + count}
        {total === null ? "" : ` of ${total}`}
      </span>
      <button type="button" data-testid="jobs-next" disabled={!more} onClick={() => go(offset + PAGE_SIZE)}>
        Older →
      </button>
    </div>
  );
}
