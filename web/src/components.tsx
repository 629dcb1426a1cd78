/** Small pieces every page uses: status lines, meters, field errors, state badges. */
import type { ComponentChildren } from "preact";
import { ApiError, type FieldProblem, messageOf } from "./api";

export function ErrorLine({ error, testid }: { error: unknown; testid?: string }) {
  if (error === undefined || error === null) return null;
  return (
    <p class="error" role="alert" data-testid={testid}>
      {messageOf(error)}
    </p>
  );
}

/** "loading" before the first answer, the error if the last fetch failed, else the children. */
export function Loaded<T>(props: { data: T | undefined; error: unknown; children: (data: T) => ComponentChildren }) {
  if (props.data === undefined) {
    return props.error ? <ErrorLine error={props.error} /> : <p class="muted">Loading…</p>;
  }
  return (
    <>
      {props.error ? <ErrorLine error={props.error} /> : null}
      {props.children(props.data)}
    </>
  );
}

export interface Segment {
  value: number;
  kind: "used" | "borrowed" | "free" | "unhealthy";
  label: string;
}

/** A horizontal bar of segments over `max` (e.g. used and borrowed GPUs against nominal). */
export function Meter({ segments, max, mark }: { segments: Segment[]; max: number; mark?: number }) {
  const scale = max > 0 ? max : 1;
  return (
    <div class="meter" role="img" aria-label={segments.map((s) => `${s.label} ${s.value}`).join(", ")}>
      {segments.map((s) =>
        s.value > 0 ? (
          <span
            class={`meter-seg ${s.kind}`}
            style={{ width: `${Math.min(100, (100 * s.value) / scale)}%` }}
            title={`${s.label}: ${s.value}`}
          />
        ) : null,
      )}
      {mark !== undefined && mark > 0 && mark < scale ? (
        <span class="meter-mark" style={{ left: `${(100 * mark) / scale}%` }} title={`nominal: ${mark}`} />
      ) : null}
    </div>
  );
}

export function StateBadge({ state, testid }: { state: string; testid?: string }) {
  return (
    <span class={`badge state-${state.toLowerCase()}`} data-testid={testid}>
      {state}
    </span>
  );
}

/** The problems for one field (by its API path) next to that field. */
export function FieldErrors({ problems, field }: { problems: FieldProblem[]; field: string }) {
  const mine = problems.filter((p) => p.field === field || p.field.startsWith(`${field}.`) || p.field.startsWith(`${field}[`));
  return (
    <>
      {mine.map((p) => (
        <span class="field-error" data-testid="field-error" data-field={p.field}>
          {p.message}
        </span>
      ))}
    </>
  );
}

/** The problems that no field on the page shows, and the error's message if it named none. */
export function OtherErrors({ error, shown, testid = "submit-error" }: { error: unknown; shown: (field: string) => boolean; testid?: string }) {
  if (!error) return null;
  const problems = error instanceof ApiError ? error.problems : [];
  const rest = problems.filter((p) => !shown(p.field));
  return (
    <div class="errors">
      {problems.length === 0 ? (
        <p class="error" role="alert" data-testid={testid}>
          {messageOf(error)}
        </p>
      ) : (
        <p class="error" role="alert">
          {problems.length === 1 ? "1 problem" : `${problems.length} problems`} to fix
          {rest.length < problems.length ? ", shown by their fields" : ""}:
        </p>
      )}
      {rest.length ? (
        <ul class="problems">
          {rest.map((p) => (
            <li>
              <code>{p.field || "(manifest)"}</code>{" "}
              <span class="field-error" data-testid="field-error" data-field={p.field}>
                {p.message}
              </span>
            </li>
          ))}
        </ul>
      ) : null}
    </div>
  );
}

export function problemsOf(error: unknown): FieldProblem[] {
  return error instanceof ApiError ? error.problems : [];
}
