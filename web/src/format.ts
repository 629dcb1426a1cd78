/** How times, durations and sizes read on the dashboard. */

/** `seconds` from now as "in 5m", "3h ago", "now". */
export function relative(at: number | null | undefined, now = Date.now() / 1000): string {
  if (at === null || at === undefined) return "—";
  const delta = at - now;
  const span = duration(Math.abs(delta));
  if (Math.abs(delta) < 1) return "now";
  return delta > 0 ? `in ${span}` : `${span} ago`;
}

/** A span of seconds in its two largest units: "45s", "5m 3s", "2h 10m", "3d 4h". */
export function duration(seconds: number): string {
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return s % 60 ? `${m}m ${s % 60}s` : `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 24) return m % 60 ? `${h}h ${m % 60}m` : `${h}h`;
  const d = Math.floor(h / 24);
  return h % 24 ? `${d}d ${h % 24}h` : `${d}d`;
}

export function clock(at: number | null | undefined): string {
  if (at === null || at === undefined) return "—";
  return new Date(at * 1000).toLocaleString();
}

export function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value >= 10 || unit === 0 ? value.toFixed(0) : value.toFixed(1)} ${units[unit]}`;
}

export function fixed(n: number | null | undefined, digits = 1): string {
  return n === null || n === undefined ? "—" : n.toFixed(digits);
}

/** Strings YAML reads back as the same string without quotes: a safe first character (or a
 * dash before a non-space, as in `-c`), no ": ", no trailing ":" or space. */
const PLAIN = /^([A-Za-z0-9_./]|-[A-Za-z0-9_./-])[A-Za-z0-9_./@:+ -]*$/;
const RESERVED = /^(true|false|null|yes|no|on|off|~|-?\d+(\.\d+)?([eE][-+]?\d+)?)$/i;

function scalar(value: unknown): string {
  if (typeof value === "string") {
    return PLAIN.test(value) && !RESERVED.test(value) && !/[ :]$/.test(value) && !value.includes(": ") ? value : JSON.stringify(value);
  }
  return JSON.stringify(value) ?? "null";
}

/** A JSON value written the way a manifest reads in YAML (block style; strings quoted only
 * where YAML would read them otherwise), for showing a job's spec. */
export function yamlish(value: unknown, indent = ""): string {
  if (Array.isArray(value)) {
    if (value.length === 0) return "[]";
    if (value.every((v) => v === null || typeof v !== "object")) return `[${value.map(scalar).join(", ")}]`;
    return value
      .map((item) => {
        const body = yamlish(item, `${indent}  `);
        return `\n${indent}- ${body.startsWith("\n") ? body.trimStart() : body}`;
      })
      .join("");
  }
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>);
    if (entries.length === 0) return "{}";
    return entries
      .map(([key, item]) => {
        const body = yamlish(item, `${indent}  `);
        return `\n${indent}${scalar(key)}:${body.startsWith("\n") ? body : ` ${body}`}`;
      })
      .join("");
  }
  return scalar(value);
}
