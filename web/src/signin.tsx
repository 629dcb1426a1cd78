/** Sign in with a kiban token: the server keeps it in an HttpOnly cookie, never in JS. */
import { useState } from "preact/hooks";
import { ApiError, messageOf, request } from "./api";
import type { WhoAmI } from "./types";

export function SignIn({ onSignedIn }: { onSignedIn: (who: WhoAmI) => void }) {
  const [token, setToken] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function submit(event: Event): Promise<void> {
    event.preventDefault();
    if (!token.trim()) {
      setError("token: paste a kiban token (kiban token create prints one)");
      return;
    }
    setBusy(true);
    setError(null);
    try {
      const res = await request("POST", "/web/session", { body: { token: token.trim() }, allowUnauthorized: true });
      onSignedIn((await res.json()) as WhoAmI);
    } catch (e) {
      setError(e instanceof ApiError && e.status === 401 ? `wrong token: ${e.message}` : messageOf(e));
    } finally {
      setBusy(false);
    }
  }

  return (
    <main class="signin">
      <form class="card signin-card" onSubmit={submit}>
        <h1>kiban</h1>
        <p class="muted">Sign in with your kiban token.</p>
        <label>
          Token
          <input
            type="password"
            autocomplete="off"
            data-testid="signin-token"
            value={token}
            onInput={(e) => setToken((e.target as HTMLInputElement).value)}
          />
        </label>
        {error ? (
          <p class="error" role="alert" data-testid="signin-error">
            {error}
          </p>
        ) : null}
        <button type="submit" class="primary" data-testid="signin-submit" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}
