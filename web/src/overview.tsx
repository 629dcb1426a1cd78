/** Overview: GPUs by flavor, each queue's quota use as bars, pending jobs by reason, tenants. */
import { getJson } from "./api";
import { Loaded, Meter } from "./components";
import { fixed } from "./format";
import { useLive } from "./live";
import type { Overview } from "./types";

export function OverviewPage() {
  const live = useLive(() => getJson<Overview>("/api/v1/overview"), []);
  return (
    <section>
      <h2>Overview</h2>
      <Loaded data={live.data} error={live.error}>
        {(o) => (
          <div class="grid2">
            <Flavors o={o} />
            <Pending o={o} />
            <Queues o={o} />
            <Tenants o={o} />
          </div>
        )}
      </Loaded>
    </section>
  );
}

function Flavors({ o }: { o: Overview }) {
  return (
    <div class="card">
      <h3>GPUs by flavor</h3>
      <table data-testid="overview-flavors">
        <thead>
          <tr>
            <th>Flavor</th>
            <th class="num">Total</th>
            <th class="num">Free</th>
            <th class="num">Used</th>
            <th class="num">Borrowed</th>
            <th class="num">Unhealthy</th>
            <th class="wide" />
          </tr>
        </thead>
        <tbody>
          {o.flavors.map((f) => (
            <tr data-testid="flavor-row" data-flavor={f.flavor} key={f.flavor}>
              <td>{f.flavor}</td>
              <td class="num">{f.total}</td>
              <td class="num">{f.free}</td>
              <td class="num">{f.used}</td>
              <td class="num">{f.borrowed}</td>
              <td class="num">{f.unhealthy}</td>
              <td>
                <Meter
                  max={f.total}
                  segments={[
                    { value: f.used - f.borrowed, kind: "used", label: "used" },
                    { value: f.borrowed, kind: "borrowed", label: "borrowed" },
                    { value: f.unhealthy, kind: "unhealthy", label: "unhealthy" },
                  ]}
                />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {o.flavors.length === 0 ? <p class="muted">No nodes yet.</p> : null}
    </div>
  );
}

function Queues({ o }: { o: Overview }) {
  return (
    <div class="card span2">
      <h3>Queues</h3>
      <p class="legend">
        <span class="key used" /> used within quota <span class="key borrowed" /> borrowed <span class="key mark" /> nominal
      </p>
      <div data-testid="overview-queues" class="queue-bars">
        {o.queues.map((queue) => (
          <div class="queue-bar" data-testid="queue-bar" data-queue={queue.name} key={queue.name}>
            <div class="queue-name">
              <a href={`/jobs?queue=${encodeURIComponent(queue.name)}`}>{queue.name}</a>
              <span class="muted"> · {queue.tenant}</span>
            </div>
            {Object.entries(queue.flavors).map(([flavor, q]) => {
              const nominal = q.nominal ?? 0;
              const max = Math.max(nominal, q.used, 1);
              return (
                <div class="queue-flavor" key={flavor}>
                  <span class="flavor-name">{flavor}</span>
                  <Meter
                    max={max}
                    mark={nominal}
                    segments={[
                      { value: q.used - q.borrowed, kind: "used", label: "used" },
                      { value: q.borrowed, kind: "borrowed", label: "borrowed" },
                    ]}
                  />
                  <span class="nums">
                    {q.used} used / {q.nominal ?? "∞"} nominal{q.borrowed ? ` · ${q.borrowed} borrowed` : ""}
                  </span>
                </div>
              );
            })}
          </div>
        ))}
        {o.queues.length === 0 ? <p class="muted">No queues.</p> : null}
      </div>
    </div>
  );
}

function Pending({ o }: { o: Overview }) {
  const total = o.pendingByReason.reduce((n, r) => n + r.count, 0);
  return (
    <div class="card">
      <h3>Pending jobs by reason</h3>
      <div data-testid="overview-pending">
      <ul class="reasons">
        {o.pendingByReason.map((r) => (
          <li data-testid="pending-reason" data-reason={r.reason} key={r.reason}>
            <a href={`/jobs?state=Pending&reason=${encodeURIComponent(r.reason)}`}>{r.reason}</a>
            <span class="count">{r.count}</span>
            <Meter max={total} segments={[{ value: r.count, kind: "used", label: r.reason }]} />
          </li>
        ))}
      </ul>
      {o.pendingByReason.length === 0 ? <p class="muted">Nothing is waiting.</p> : null}
      </div>
    </div>
  );
}

function Tenants({ o }: { o: Overview }) {
  return (
    <div class="card span2">
      <h3>Tenants</h3>
      <table data-testid="overview-tenants">
        <thead>
          <tr>
            <th>Tenant</th>
            <th class="num">Standing</th>
            <th class="num">GPU-hours</th>
          </tr>
        </thead>
        <tbody>
          {o.tenants.map((t) => (
            <tr data-testid="tenant-row" data-tenant={t.name} key={t.name}>
              <td>{t.name}</td>
              <td class="num">{fixed(t.standing, 3)}</td>
              <td class="num">{fixed(t.usageGpuHours, 2)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
