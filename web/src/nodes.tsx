/** Nodes: capacity and use, health conditions (details from `/nodes/{n}/health`), and
 * cordon / uncordon for admins. */
import { useState } from "preact/hooks";
import { getJson, send } from "./api";
import { ErrorLine, Loaded, Meter } from "./components";
import { bytes, clock, relative } from "./format";
import { useLive } from "./live";
import { useWhoAmI } from "./session";
import type { Condition, Node } from "./types";

export function NodesPage() {
  const live = useLive(() => getJson<Node[]>("/api/v1/nodes"), []);
  const who = useWhoAmI();
  const [error, setError] = useState<unknown>(undefined);
  const [open, setOpen] = useState<string | null>(null);

  async function cordon(node: Node, on: boolean): Promise<void> {
    setError(undefined);
    try {
      await send("POST", `/api/v1/nodes/${encodeURIComponent(node.name)}/${on ? "cordon" : "uncordon"}`);
    } catch (e) {
      setError(e);
    }
    live.refresh();
  }

  return (
    <section>
      <h2>Nodes</h2>
      <ErrorLine error={error} />
      <Loaded data={live.data} error={live.error}>
        {(nodes) => (
          <table data-testid="nodes-table">
            <thead>
              <tr>
                <th>Node</th>
                <th class="num">GPUs</th>
                <th class="wide">Use</th>
                <th class="num">CPUs</th>
                <th class="num">Memory</th>
                <th>Health</th>
                <th>Conditions</th>
                {who?.isAdmin ? <th /> : null}
              </tr>
            </thead>
            <tbody>
              {nodes.map((n) => (
                <>
                  <tr data-testid="node-row" data-node={n.name} key={n.name} class={n.cordoned ? "cordoned" : ""}>
                    <td class="nowrap">
                      {n.name}
                      {n.cordoned ? <span class="badge warn"> cordoned{n.cordonSource ? ` (${n.cordonSource})` : ""}</span> : null}
                    </td>
                    <td class="num">
                      {n.gpusInUse}/{n.gpus}
                    </td>
                    <td>
                      <Meter max={n.gpus} segments={[{ value: n.gpusInUse, kind: "used", label: "GPUs in use" }]} />
                    </td>
                    <td class="num">{(n.cpuMillis / 1000).toFixed(n.cpuMillis % 1000 ? 1 : 0)}</td>
                    <td class="num">{bytes(n.memory)}</td>
                    <td>
                      <span class={`badge ${n.healthy ? "ok" : "bad"}`} title={n.healthMessage}>
                        {n.healthy ? "healthy" : "unhealthy"}
                      </span>
                    </td>
                    <td data-testid="node-conditions">
                      <Conditions conditions={n.conditions} />{" "}
                      <button type="button" class="link" onClick={() => setOpen(open === n.name ? null : n.name)}>
                        {open === n.name ? "hide" : "details"}
                      </button>
                    </td>
                    {who?.isAdmin ? (
                      <td>
                        {n.cordoned ? (
                          <button type="button" data-testid="node-uncordon" onClick={() => void cordon(n, false)}>
                            Uncordon
                          </button>
                        ) : (
                          <button type="button" data-testid="node-cordon" onClick={() => void cordon(n, true)}>
                            Cordon
                          </button>
                        )}
                      </td>
                    ) : null}
                  </tr>
                  {open === n.name ? (
                    <tr class="details">
                      <td colSpan={who?.isAdmin ? 8 : 7}>
                        <Health node={n.name} />
                      </td>
                    </tr>
                  ) : null}
                </>
              ))}
            </tbody>
          </table>
        )}
      </Loaded>
    </section>
  );
}

/** Problems (status True) one by one; the checks that pass or cannot tell, counted. */
function Conditions({ conditions }: { conditions: Condition[] }) {
  if (conditions.length === 0) return <span class="muted">none reported</span>;
  const problems = conditions.filter((c) => c.status === "True");
  const ok = conditions.filter((c) => c.status === "False");
  const unknown = conditions.filter((c) => c.status !== "True" && c.status !== "False");
  return (
    <>
      {problems.map((c) => (
        <span class="badge cond-true" title={c.reason} key={c.type} data-condition={c.type}>
          {c.type}
          {c.reason ? `: ${c.reason}` : ""}
        </span>
      ))}
      {ok.length ? (
        <span class="badge cond-false" title={ok.map((c) => c.type).join(", ")}>
          {ok.length} ok
        </span>
      ) : null}
      {unknown.length ? (
        <span class="badge cond-unknown" title={unknown.map((c) => `${c.type}: ${c.reason || c.status}`).join("\n")}>
          {unknown.length} unknown
        </span>
      ) : null}
    </>
  );
}

interface HealthCondition extends Condition {
  message: string;
  lastTransitionTime: number | null;
}

interface NodeHealth {
  conditions: HealthCondition[];
  history: (Condition & { message: string; at: number })[];
  actions: unknown[];
  agent: { address: string; reportedAt: number | null; stale: boolean } | null;
}

/** A node's health report: each check's status with its message, the agent, recent changes. */
function Health({ node }: { node: string }) {
  const live = useLive(() => getJson<NodeHealth>(`/api/v1/nodes/${encodeURIComponent(node)}/health`), [node]);
  return (
    <Loaded data={live.data} error={live.error}>
      {(health) => (
        <div class="health">
          <p class="muted">
            {health.agent
              ? `agent ${health.agent.address}, last report ${relative(health.agent.reportedAt)}${health.agent.stale ? " (stale)" : ""}`
              : "no agent reports"}
          </p>
          <table>
            <thead>
              <tr>
                <th>Check</th>
                <th>Status</th>
                <th>Reason</th>
                <th>Message</th>
                <th>Since</th>
              </tr>
            </thead>
            <tbody>
              {health.conditions.map((c) => (
                <tr key={c.type}>
                  <td>{c.type}</td>
                  <td>
                    <span class={`badge cond-${c.status.toLowerCase()}`}>{c.status}</span>
                  </td>
                  <td>{c.reason}</td>
                  <td>{c.message}</td>
                  <td title={clock(c.lastTransitionTime)}>{relative(c.lastTransitionTime)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </Loaded>
  );
}
