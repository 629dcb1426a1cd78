/** The dashboard's one way to the API: same-origin cookie auth, the CSRF header on every
 * call, 401 sends the user to sign in, and errors parsed into messages and field problems. */
import { navigate } from "./router";

/** One input field the API found wrong: `field` is its path, as `spec.tasks[0].replicas`. */
export interface FieldProblem {
  field: string;
  message: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly problems: FieldProblem[] = [],
  ) {
    super(message);
  }
}

export function cookie(name: string): string | null {
  for (const part of document.cookie.split(";")) {
    const [key, ...rest] = part.trim().split("=");
    if (key === name) return decodeURIComponent(rest.join("="));
  }
  return null;
}

interface RequestOptions {
  body?: unknown;
  /** The body is already text of this type (a YAML manifest); otherwise it is sent as JSON. */
  contentType?: string;
  signal?: AbortSignal;
  /** Let a 401 through to the caller instead of going to the sign-in page. */
  allowUnauthorized?: boolean;
}

/** The API's error body, `{"error": {"message", "problems"}}`, or FastAPI's `{"detail"}`. */
async function errorOf(res: Response): Promise<ApiError> {
  let message = `${res.status} ${res.statusText}`;
  let problems: FieldProblem[] = [];
  try {
    const body: unknown = await res.json();
    if (body && typeof body === "object") {
      const error = (body as { error?: { message?: unknown; problems?: unknown } }).error;
      const detail = (body as { detail?: unknown }).detail;
      if (error && typeof error.message === "string") {
        message = error.message;
        if (Array.isArray(error.problems)) {
          problems = error.problems.filter(
            (p): p is FieldProblem =>
              typeof p === "object" && p !== null && typeof p.field === "string",
          );
        }
      } else if (typeof detail === "string") {
        message = detail;
      } else if (Array.isArray(detail)) {
        problems = detail.map((d: { loc?: unknown[]; msg?: string }) => ({
          field: (d.loc ?? []).filter((x) => x !== "body").join("."),
          message: d.msg ?? "invalid",
        }));
        message = "the request has errors";
      }
    }
  } catch {
    // not JSON: the status line says what there is to say
  }
  return new ApiError(res.status, message, problems);
}

export async function request(method: string, path: string, opts: RequestOptions = {}): Promise<Response> {
  const headers: Record<string, string> = { Accept: "application/json" };
  const csrf = cookie("kiban_csrf");
  if (csrf) headers["X-CSRF-Token"] = csrf;
  let body: BodyInit | undefined;
  if (opts.body !== undefined) {
    if (opts.contentType) {
      headers["Content-Type"] = opts.contentType;
      body = opts.body as BodyInit;
    } else {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(opts.body);
    }
  }
  const init: RequestInit = { method, headers, credentials: "same-origin" };
  if (body !== undefined) init.body = body;
  if (opts.signal) init.signal = opts.signal;
  let res: Response;
  try {
    res = await fetch(path, init);
  } catch (e) {
    if (e instanceof DOMException && e.name === "AbortError") throw e;
    throw new ApiError(0, `cannot reach the kiban server (${e instanceof Error ? e.message : String(e)})`);
  }
  if (res.status === 401 && !opts.allowUnauthorized) {
    const here = location.pathname + location.search;
    navigate(location.pathname === "/signin" ? here : `/signin?next=${encodeURIComponent(here)}`, true);
    throw await errorOf(res);
  }
  if (!res.ok) throw await errorOf(res);
  return res;
}

export async function getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
  const res = await request("GET", path, signal ? { signal } : {});
  return (await res.json()) as T;
}

/** A page of a list and how many items match in all (the `X-Total-Count` header; null when
 * the server does not say). */
export async function getPage<T>(path: string): Promise<{ items: T[]; total: number | null }> {
  const res = await request("GET", path);
  const items = (await res.json()) as T[];
  const header = res.headers.get("X-Total-Count");
  const total = header === null ? NaN : Number(header);
  return { items, total: Number.isFinite(total) ? total : null };
}

export async function send<T>(method: string, path: string, body?: unknown, contentType?: string): Promise<T> {
  const opts: RequestOptions = {};
  if (body !== undefined) opts.body = body;
  if (contentType) opts.contentType = contentType;
  const res = await request(method, path, opts);
  const text = await res.text();
  return (text ? JSON.parse(text) : null) as T;
}

/** Read a streamed response as text pieces as they arrive (with how many bytes each took),
 * until it ends or the request's signal aborts. */
export async function readText(res: Response, onText: (text: string, bytes: number) => void): Promise<void> {
  if (!res.body) {
    const buffer = await res.arrayBuffer();
    onText(new TextDecoder().decode(buffer), buffer.byteLength);
    return;
  }
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    onText(decoder.decode(value, { stream: true }), value.byteLength);
  }
  const tail = decoder.decode();
  if (tail) onText(tail, 0);
}

/** Resolve after `ms`, or at once when `signal` aborts. */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = window.setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      window.clearTimeout(timer);
      resolve();
    });
  });
}

/** The message to show for an error of any kind. */
export function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}

export function q(params: Record<string, string | number | undefined | null>): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}
