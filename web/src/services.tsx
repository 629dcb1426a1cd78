/** Services: the list; one service's revisions, traffic split, replicas and latency; a chat
 * playground streaming the reply (SSE) and a try-it box for embeddings. */
import { useRef, useState } from "preact/hooks";
import { ApiError, getJson, messageOf, readText, request } from "./api";
import { ErrorLine, Loaded, StateBadge } from "./components";
import { fixed, relative } from "./format";
import { useLive } from "./live";
import type { Service } from "./types";

export function ServicesPage() {
  const live = useLive(() => getJson<Service[]>("/api/v1/services"), []);
  return (
    <section>
      <h2>Services</h2>
      <Loaded data={live.data} error={live.error}>
        {(services) => (
          <>
            <table data-testid="services-table">
              <thead>
                <tr>
                  <th>Service</th>
                  <th>Tenant</th>
                  <th>State</th>
                  <th>Model</th>
                  <th>Runtime</th>
                  <th class="num">Ready replicas</th>
                  <th class="num">Requests/s</th>
                  <th class="num">p50 ms</th>
                </tr>
              </thead>
              <tbody>
                {services.map((s) => (
                  <tr data-testid="service-row" data-service={s.name} key={`${s.tenant}/${s.name}`}>
                    <td>
                      <a href={`/services/${encodeURIComponent(s.name)}`}>{s.name}</a>
                    </td>
                    <td>{s.tenant}</td>
                    <td>
                      <StateBadge state={s.state} />
                    </td>
                    <td>{s.model}</td>
                    <td>{s.runtime}</td>
                    <td class="num">
                      {s.replicas.filter((r) => r.ready).length}/{s.replicas.length}
                    </td>
                    <td class="num">{fixed(s.stats?.rps, 2)}</td>
                    <td class="num">{fixed(s.stats?.p50Ms, 1)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
            {services.length === 0 ? <p class="muted">No services. `kiban serve apply` deploys one.</p> : null}
          </>
        )}
      </Loaded>
    </section>
  );
}

export function ServicePage({ name }: { name: string }) {
  const live = useLive(() => getJson<Service>(`/api/v1/services/${encodeURIComponent(name)}`), [name]);
  if (live.error instanceof ApiError && live.error.status === 404) {
    return (
      <section data-testid="not-found">
        <h2>Service not found</h2>
        <p>
          There is no service <code>{name}</code> that you may see. <a href="/services">All services</a>
        </p>
      </section>
    );
  }
  return (
    <section>
      <h2>
        {name} <a href="/services" class="muted small">all services</a>
      </h2>
      <Loaded data={live.data} error={live.error}>
        {(s) => (
          <div class="grid2">
            <div class="card">
              <h3>Status</h3>
              <dl class="summary">
                <dt>State</dt>
                <dd>
                  <StateBadge state={s.state} />
                </dd>
                <dt>Model</dt>
                <dd>
                  {s.model} <span class="muted">({s.runtime})</span>
                </dd>
                <dt>URL</dt>
                <dd class="mono">{s.url ?? "—"}</dd>
                <dt>Replicas</dt>
                <dd>
                  {s.minReplicas}–{s.maxReplicas}
                </dd>
              </dl>
            </div>
            <div class="card" data-testid="service-latency">
              <h3>Traffic and latency</h3>
              {s.stats ? (
                <dl class="summary">
                  <dt>Requests/s</dt>
                  <dd>{fixed(s.stats.rps, 2)}</dd>
                  <dt>p50</dt>
                  <dd>{s.stats.p50Ms === null ? "—" : `${fixed(s.stats.p50Ms, 1)} ms`}</dd>
                  <dt>p99</dt>
                  <dd>{s.stats.p99Ms === null ? "—" : `${fixed(s.stats.p99Ms, 1)} ms`}</dd>
                  <dt>In flight</dt>
                  <dd>{s.stats.inFlight}</dd>
                  <dt>Queued</dt>
                  <dd>{s.stats.queued}</dd>
                  <dt>Requests</dt>
                  <dd>{s.stats.requests}</dd>
                </dl>
              ) : (
                <p class="muted">No traffic measured yet.</p>
              )}
            </div>
            <div class="card">
              <h3>Traffic split</h3>
              <div data-testid="service-traffic" class="traffic">
                {Object.entries(s.traffic).map(([revision, percent]) => (
                  <div class="traffic-row" key={revision}>
                    <span class="mono">{revision}</span>
                    <div class="meter">
                      <span class="meter-seg used" style={{ width: `${percent}%` }} />
                    </div>
                    <span class="num">{percent}%</span>
                  </div>
                ))}
                {Object.keys(s.traffic).length === 0 ? <p class="muted">No revision takes traffic.</p> : null}
              </div>
            </div>
            <div class="card">
              <h3>Revisions</h3>
              <table data-testid="service-revisions">
                <thead>
                  <tr>
                    <th>Revision</th>
                    <th>Role</th>
                    <th>State</th>
                    <th class="num">Traffic</th>
                    <th class="num">Ready/desired</th>
                    <th>Created</th>
                  </tr>
                </thead>
                <tbody>
                  {s.revisions.map((r) => (
                    <tr key={r.name} title={r.message}>
                      <td class="mono">{r.name}</td>
                      <td>{r.role || "—"}</td>
                      <td>{r.state}</td>
                      <td class="num">{r.trafficPercent}%</td>
                      <td class="num">
                        {r.readyReplicas}/{r.desiredReplicas}
                      </td>
                      <td>{relative(r.createdAt)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
            <div class="card span2">
              <h3>Replicas</h3>
              <table data-testid="service-replicas">
                <thead>
                  <tr>
                    <th>Job</th>
                    <th>Revision</th>
                    <th>State</th>
                    <th>Node</th>
                    <th>Ready</th>
                  </tr>
                </thead>
                <tbody>
                  {s.replicas.map((r) => (
                    <tr key={r.job}>
                      <td>
                        <a class="mono" href={`/jobs/${encodeURIComponent(r.job)}`}>
                          {r.job}
                        </a>
                      </td>
                      <td class="mono">{r.revision}</td>
                      <td>
                        <StateBadge state={r.state} />
                      </td>
                      <td>{r.node ?? "—"}</td>
                      <td title={r.reason ?? ""}>{r.ready ? "yes" : r.reason ?? "no"}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
            {s.task !== "text_embedding" && (
              <div class="card span2">
                <h3>Chat</h3>
                <Chat service={s} />
              </div>
            )}
            {s.task !== "text_generation" && (
              <div class="card span2">
                <h3>Embeddings</h3>
                <Embeddings service={s} />
              </div>
            )}
          </div>
        )}
      </Loaded>
    </section>
  );
}

interface Message {
  role: "user" | "assistant" | "system";
  content: string;
}

/** The text a server-sent event stream of OpenAI chunks carries, fed piece by piece. */
export class SseChat {
  private buffer = "";
  done = false;

  /** Feed raw stream text; returns the content the complete events in it add. */
  feed(text: string): string {
    this.buffer += text;
    let out = "";
    let cut: number;
    while ((cut = this.buffer.search(/\r?\n\r?\n/)) >= 0) {
      const event = this.buffer.slice(0, cut);
      this.buffer = this.buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
      const data = event
        .split(/\r?\n/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).trimStart())
        .join("\n");
      if (!data) continue;
      if (data === "[DONE]") {
        this.done = true;
        continue;
      }
      try {
        const chunk = JSON.parse(data) as { choices?: { delta?: { content?: string }; text?: string }[]; error?: { message?: string } };
        if (chunk.error?.message) throw new Error(chunk.error.message);
        for (const choice of chunk.choices ?? []) out += choice.delta?.content ?? choice.text ?? "";
      } catch (e) {
        if (e instanceof SyntaxError) continue; // a keep-alive or comment, not a chunk
        throw e;
      }
    }
    return out;
  }
}

function Chat({ service }: { service: Service }) {
  const [messages, setMessages] = useState<Message[]>([]);
  const [input, setInput] = useState("");
  const [streaming, setStreaming] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const abort = useRef<AbortController | null>(null);

  async function sendMessage(event: Event): Promise<void> {
    event.preventDefault();
    const text = input.trim();
    if (!text || streaming) return;
    const history: Message[] = [...messages, { role: "user", content: text }];
    setMessages([...history, { role: "assistant", content: "" }]);
    setInput("");
    setError(undefined);
    setStreaming(true);
    const controller = new AbortController();
    abort.current = controller;
    try {
      const res = await request("POST", `/api/v1/services/${encodeURIComponent(service.name)}/openai/chat/completions`, {
        body: { model: service.model, messages: history, stream: true },
        signal: controller.signal,
      });
      const sse = new SseChat();
      await readText(res, (piece) => {
        const added = sse.feed(piece);
        if (added) {
          setMessages((ms) => {
            const last = ms[ms.length - 1] as Message;
            return [...ms.slice(0, -1), { ...last, content: last.content + added }];
          });
        }
      });
    } catch (e) {
      if (!controller.signal.aborted) setError(e);
      // a reply that never began leaves no empty bubble behind
      setMessages((ms) => (ms.length && (ms[ms.length - 1] as Message).content === "" ? ms.slice(0, -1) : ms));
    } finally {
      setStreaming(false);
      abort.current = null;
    }
  }

  return (
    <div class="chat">
      <div data-testid="chat-messages" class="chat-messages">
        {messages.map((m, i) => (
          <div data-testid="chat-message" data-role={m.role} class={`chat-message ${m.role}`} key={i}>
            <span class="role">{m.role === "user" ? "you" : service.model}</span>
            <div class="text">{m.content}</div>
          </div>
        ))}
        {streaming ? (
          <div data-testid="chat-streaming" class="muted">
            streaming…{" "}
            <button type="button" class="link" onClick={() => abort.current?.abort()}>
              stop
            </button>
          </div>
        ) : null}
      </div>
      <ErrorLine error={error} />
      <form class="chat-form" onSubmit={(e) => void sendMessage(e)}>
        <textarea
          data-testid="chat-input"
          rows={2}
          placeholder="Say something (Enter sends, Shift+Enter for a new line)"
          value={input}
          onInput={(e) => setInput((e.target as HTMLTextAreaElement).value)}
          onKeyDown={(e) => {
            if (e.key === "Enter" && !e.shiftKey) void sendMessage(e);
          }}
        />
        <button type="submit" class="primary" data-testid="chat-send" disabled={streaming}>
          Send
        </button>
        {messages.length ? (
          <button type="button" onClick={() => setMessages([])} disabled={streaming}>
            Clear
          </button>
        ) : null}
      </form>
    </div>
  );
}

function Embeddings({ service }: { service: Service }) {
  const [input, setInput] = useState("");
  const [result, setResult] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(undefined);
  const [busy, setBusy] = useState(false);

  async function embed(event: Event): Promise<void> {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const res = await request("POST", `/api/v1/services/${encodeURIComponent(service.name)}/openai/embeddings`, {
        body: { model: service.model, input: input },
      });
      const body = (await res.json()) as { data?: { embedding?: number[] }[] };
      const vector = body.data?.[0]?.embedding ?? [];
      const head = vector.slice(0, 8).map((v) => v.toFixed(4));
      setResult(`${vector.length} dimensions: [${head.join(", ")}${vector.length > 8 ? ", …" : ""}]`);
    } catch (e) {
      setResult(null);
      setError(messageOf(e));
    } finally {
      setBusy(false);
    }
  }

  return (
    <form class="embed" onSubmit={(e) => void embed(e)}>
      <input data-testid="embed-input" value={input} placeholder="Text to embed" onInput={(e) => setInput((e.target as HTMLInputElement).value)} />
      <button type="submit" data-testid="embed-send" disabled={busy || !input.trim()}>
        Embed
      </button>
      <ErrorLine error={error} />
      {result ? (
        <pre data-testid="embed-result" class="mono">
          {result}
        </pre>
      ) : null}
    </form>
  );
}
