/** Submit a job from a form (which builds a kiban manifest) or a pasted / uploaded manifest
 * (kiban or Volcano, sent as YAML); the API's field errors show next to their fields. */
import { useEffect, useState } from "preact/hooks";
import { getJson, send } from "./api";
import { FieldErrors, OtherErrors, problemsOf } from "./components";
import { navigate } from "./router";
import { maySubmit, useWhoAmI } from "./session";
import type { Job, Queue } from "./types";

/** The form's inputs and the manifest field each one fills. */
const FIELD_OF = {
  name: "metadata.name",
  command: "spec.tasks[0].command",
  nodes: "spec.tasks[0].replicas",
  gpus: "spec.tasks[0].resources.gpu",
  queue: "spec.queue",
  priority: "spec.priorityClass",
} as const;

type FormKey = keyof typeof FIELD_OF;

/** Each input's test id, spelled out (the browser tests and the bundle check search for them). */
const TESTID: Record<FormKey, string> = {
  name: "submit-name",
  command: "submit-command",
  nodes: "submit-nodes",
  gpus: "submit-gpus",
  queue: "submit-queue",
  priority: "submit-priority",
};

/** Split a command line into words as a shell would for plain words and quotes (no expansion). */
export function splitCommand(line: string): string[] {
  const words: string[] = [];
  let word = "";
  let quote: string | null = null;
  let inWord = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i] as string;
    if (quote) {
      if (c === quote) quote = null;
      else if (c === "\\" && quote === '"' && i + 1 < line.length) word += line[++i];
      else word += c;
    } else if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
    } else if (c === "\\" && i + 1 < line.length) {
      word += line[++i];
      inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) words.push(word);
      word = "";
      inWord = false;
    } else {
      word += c;
      inWord = true;
    }
  }
  if (inWord) words.push(word);
  return words;
}

/** A whole number as a number; anything else as typed, so that the API names what is wrong. */
function count(text: string): number | string {
  return /^\s*\d+\s*$/.test(text) ? Number(text) : text;
}

export function buildManifest(form: Record<FormKey, string>): Record<string, unknown> {
  const nodes = count(form.nodes);
  const task: Record<string, unknown> = {
    name: "worker",
    replicas: nodes,
    resources: { gpu: count(form.gpus) },
    command: splitCommand(form.command),
  };
  if (typeof nodes === "number" && nodes > 1) task["maxReplicasPerNode"] = 1;
  const spec: Record<string, unknown> = { queue: form.queue.trim() || "default", tasks: [task] };
  if (form.priority.trim()) spec["priorityClass"] = form.priority.trim();
  return { apiVersion: "kiban/v1", kind: "Job", metadata: { name: form.name.trim() }, spec };
}

const EXAMPLE = `apiVersion: kiban/v1
kind: Job
metadata: {name: hello}
spec:
  queue: default
  tasks:
    - name: worker
      replicas: 1
      resources: {gpu: 1}
      command: [python, -c, "print('hello')"]
`;

export function SubmitPage() {
  const [tab, setTab] = useState<"form" | "manifest">("form");
  const who = useWhoAmI();
  if (!maySubmit(who)) {
    return (
      <section data-testid="submit-forbidden">
        <h2>Submit a job</h2>
        <p class="muted">A viewer's token reads and changes nothing: ask a tenant-admin of {who?.tenant ?? "your tenant"} for a member's token to submit.</p>
      </section>
    );
  }
  return (
    <section>
      <h2>Submit a job</h2>
      <div class="tabs" role="tablist">
        <button type="button" role="tab" aria-selected={tab === "form"} class={tab === "form" ? "active" : ""} data-testid="submit-form-tab" onClick={() => setTab("form")}>
          Form
        </button>
        <button type="button" role="tab" aria-selected={tab === "manifest"} class={tab === "manifest" ? "active" : ""} data-testid="submit-manifest-tab" onClick={() => setTab("manifest")}>
          Manifest
        </button>
      </div>
      {tab === "form" ? <JobForm /> : <ManifestForm />}
    </section>
  );
}

function useSubmit(): [boolean, unknown, (body: unknown, contentType?: string) => Promise<void>] {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  async function submit(body: unknown, contentType?: string): Promise<void> {
    setBusy(true);
    setError(undefined);
    try {
      const job = await send<Job>("POST", "/api/v1/jobs", body, contentType);
      navigate(`/jobs/${encodeURIComponent(job.id)}`);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  }
  return [busy, error, submit];
}

function JobForm() {
  const [form, setForm] = useState<Record<FormKey, string>>({ name: "", command: "", nodes: "1", gpus: "1", queue: "", priority: "" });
  const [queues, setQueues] = useState<Queue[]>([]);
  const [busy, error, submit] = useSubmit();

  // the queues the user may submit to: offered in a list, the first ("default" if theirs) filled in
  useEffect(() => {
    getJson<Queue[]>("/api/v1/queues").then(
      (qs) => {
        setQueues(qs);
        const pick = qs.find((q) => q.name === "default") ?? qs[0];
        if (pick) setForm((f) => (f.queue ? f : { ...f, queue: pick.name }));
      },
      () => setQueues([]),
    );
  }, []);
  const problems = problemsOf(error);
  const fields = Object.values(FIELD_OF) as string[];
  const shown = (field: string): boolean => fields.some((f) => field === f || field.startsWith(`${f}.`) || field.startsWith(`${f}[`));

  const input = (key: FormKey, label: string, props: Record<string, unknown> = {}) => (
    <label class={problems.some((p) => shown(p.field) && p.field.startsWith(FIELD_OF[key])) ? "invalid" : ""}>
      {label}
      <input
        data-testid={TESTID[key]}
        name={key}
        value={form[key]}
        onInput={(e) => setForm({ ...form, [key]: (e.target as HTMLInputElement).value })}
        {...props}
      />
      <FieldErrors problems={problems} field={FIELD_OF[key]} />
    </label>
  );

  return (
    <form
      class="card form"
      onSubmit={(e) => {
        e.preventDefault();
        void submit(buildManifest(form));
      }}
    >
      {input("name", "Name", { placeholder: "my-job", required: false })}
      {input("command", "Command", { placeholder: "python train.py --epochs 5", class: "mono" })}
      <div class="row">
        {input("nodes", "Nodes", { inputmode: "numeric" })}
        {input("gpus", "GPUs per node", { inputmode: "numeric" })}
      </div>
      <div class="row">
        {input("queue", "Queue", { list: "queue-names", placeholder: "default" })}
        {input("priority", "Priority class", { placeholder: "the queue's default", list: "priority-classes" })}
      </div>
      <datalist id="queue-names">
        {queues.map((q) => (
          <option value={q.name}>{q.tenant}</option>
        ))}
      </datalist>
      <datalist id="priority-classes">
        <option value="low" />
        <option value="normal" />
        <option value="high" />
      </datalist>
      <OtherErrors error={error} shown={shown} />
      <button type="submit" class="primary" data-testid="submit-button" disabled={busy}>
        {busy ? "Submitting…" : "Submit"}
      </button>
    </form>
  );
}

function ManifestForm() {
  const [text, setText] = useState("");
  const [readError, setReadError] = useState<string | null>(null);
  const [busy, error, submit] = useSubmit();

  async function load(file: File | undefined): Promise<void> {
    if (!file) return;
    setReadError(null);
    try {
      setText(await file.text());
    } catch {
      setReadError(`could not read ${file.name}`);
    }
  }

  return (
    <form
      class="card form"
      onSubmit={(e) => {
        e.preventDefault();
        void submit(text, "application/yaml");
      }}
    >
      <label>
        Manifest (kiban or Volcano, YAML or JSON)
        <textarea data-testid="submit-manifest" class="mono" rows={18} spellcheck={false} placeholder={EXAMPLE} value={text} onInput={(e) => setText((e.target as HTMLTextAreaElement).value)} />
      </label>
      <label>
        Or upload a file
        <input type="file" accept=".yaml,.yml,.json,application/yaml,application/json" data-testid="submit-manifest-file" onChange={(e) => void load((e.target as HTMLInputElement).files?.[0])} />
      </label>
      {readError ? <p class="error">{readError}</p> : null}
      <OtherErrors error={error} shown={() => false} />
      <button type="submit" class="primary" data-testid="submit-button" disabled={busy}>
        {busy ? "Submitting…" : "Submit"}
      </button>
    </form>
  );
}
