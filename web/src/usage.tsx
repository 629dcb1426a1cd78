/** Usage: each tenant's GPU-hours per step and its decayed GPU-hours (what fair share weighs)
 * over time (uPlot), and a table of both. */
import { useEffect, useRef, useState } from "preact/hooks";
import uPlot from "uplot";
import { getJson, q } from "./api";
import { Loaded } from "./components";
import { clock, duration, fixed } from "./format";
import { useLive } from "./live";
import type { UsageHistory } from "./types";

const RANGES: [string, number, number][] = [
  ["6 hours", 6, 300],
  ["24 hours", 24, 900],
  ["7 days", 168, 3600],
  ["30 days", 720, 14400],
];

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f"];

export function UsagePage() {
  const [range, setRange] = useState(1);
  const [, hours, step] = RANGES[range] as [string, number, number];
  const live = useLive(() => getJson<UsageHistory>(`/api/v1/usage/history${q({ hours, step })}`), [hours, step], 10_000);
  return (
    <section>
      <h2>Usage</h2>
      <div class="filters">
        <label>
          Range
          <select value={String(range)} onChange={(e) => setRange(Number((e.target as HTMLSelectElement).value))}>
            {RANGES.map(([label], i) => (
              <option value={String(i)}>{label}</option>
            ))}
          </select>
        </label>
      </div>
      <Loaded data={live.data} error={live.error}>
        {(history) => (
          <>
            <div class="grid2">
              <div class="card">
                <h3>GPU-hours per {duration(history.step)}</h3>
                <Chart history={history} pick="gpuHours" testid="usage-chart-gpu-hours" />
              </div>
              <div class="card">
                <h3>Decayed GPU-hours (what fair share weighs)</h3>
                <Chart history={history} pick="decayedGpuHours" testid="usage-chart-decayed" />
              </div>
            </div>
            <UsageTable history={history} />
          </>
        )}
      </Loaded>
    </section>
  );
}

/** One series per tenant on a shared time axis (the union of their points' times). */
function seriesOf(history: UsageHistory, pick: "gpuHours" | "decayedGpuHours"): uPlot.AlignedData {
  const times = [...new Set(history.tenants.flatMap((t) => t.points.map((p) => p.at)))].sort((a, b) => a - b);
  const index = new Map(times.map((t, i) => [t, i]));
  const columns = history.tenants.map((t) => {
    const column: (number | null)[] = new Array<number | null>(times.length).fill(null);
    for (const p of t.points) column[index.get(p.at) as number] = p[pick];
    return column;
  });
  return [times, ...columns] as uPlot.AlignedData;
}

function Chart({ history, pick, testid }: { history: UsageHistory; pick: "gpuHours" | "decayedGpuHours"; testid: string }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const tenants = history.tenants.map((t) => t.tenant).join("\n");

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const opts: uPlot.Options = {
      width: Math.max(320, el.clientWidth),
      height: 260,
      series: [
        {},
        ...history.tenants.map((t, i) => ({
          label: t.tenant,
          stroke: COLORS[i % COLORS.length] as string,
          width: 2,
          spanGaps: true,
          value: (_u: uPlot, v: number | null) => (v === null ? "—" : v.toFixed(2)),
        })),
      ],
      axes: [{}, { label: "GPU-hours", size: 60 }],
      scales: { x: { time: true } },
    };
    plot.current = new uPlot(opts, seriesOf(history, pick), el);
    const resize = (): void => plot.current?.setSize({ width: Math.max(320, el.clientWidth), height: 260 });
    window.addEventListener("resize", resize);
    return () => {
      window.removeEventListener("resize", resize);
      plot.current?.destroy();
      plot.current = null;
    };
    // a new uPlot only when the tenants change; new points go through setData below
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [tenants, pick]);

  useEffect(() => {
    plot.current?.setData(seriesOf(history, pick));
  }, [history, pick]);

  return <div class="chart" data-testid={testid} ref={box} />;
}

function UsageTable({ history }: { history: UsageHistory }) {
  return (
    <div class="card">
      <h3>By tenant</h3>
      <table data-testid="usage-table">
        <thead>
          <tr>
            <th>Tenant</th>
            <th class="num">GPU-hours in the range</th>
            <th class="num">Decayed GPU-hours (latest)</th>
            <th>As of</th>
          </tr>
        </thead>
        <tbody>
          {history.tenants.map((t) => {
            const last = t.points[t.points.length - 1];
            const inRange = t.points.reduce((sum, p) => sum + p.gpuHours, 0);
            return (
              <tr key={t.tenant} data-tenant={t.tenant}>
                <td>{t.tenant}</td>
                <td class="num">{fixed(inRange, 2)}</td>
                <td class="num">{fixed(last?.decayedGpuHours, 2)}</td>
                <td>{clock(last?.at)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
