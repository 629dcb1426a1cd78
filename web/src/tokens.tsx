/** Tokens: an admin's view of every tenant's, a tenant-admin's of their tenant's (never a
 * secret); the revoked ones too on request (who had access, and when it ended). */
import { useState } from "preact/hooks";
import { getJson, q } from "./api";
import { Loaded } from "./components";
import { clock, relative } from "./format";
import { useLive } from "./live";
import { mayManageTenant, useWhoAmI } from "./session";
import type { TokenInfo } from "./types";

export function TokensPage() {
  const who = useWhoAmI();
  const [revoked, setRevoked] = useState(false);
  const live = useLive(() => getJson<TokenInfo[]>(`/api/v1/tokens${q({ all: revoked ? "true" : undefined })}`), [revoked], 10_000);
  if (!mayManageTenant(who)) {
    return (
      <section data-testid="tokens-forbidden">
        <h2>Tokens</h2>
        <p class="muted">Tokens are managed by admins and tenant-admins; this token is {who?.role ?? "unknown"}.</p>
      </section>
    );
  }
  return (
    <section>
      <h2>Tokens{who?.tenant ? ` of ${who.tenant}` : ""}</h2>
      <div class="filters">
        <label>
          <input type="checkbox" data-testid="tokens-revoked" checked={revoked} onChange={(e) => setRevoked((e.target as HTMLInputElement).checked)} /> revoked ones too
        </label>
      </div>
      <Loaded data={live.data} error={live.error}>
        {(tokens) => (
          <table data-testid="tokens-table">
            <thead>
              <tr>
                <th class="num">ID</th>
                <th>Tenant</th>
                <th>Member</th>
                <th>Role</th>
                <th>Created</th>
                <th>Expires</th>
                <th>Last use</th>
                {revoked ? <th>Revoked</th> : null}
              </tr>
            </thead>
            <tbody>
              {tokens.map((t) => (
                <tr data-testid="token-row" data-member={t.member} data-role={t.role} key={t.id}>
                  <td class="num">{t.id}</td>
                  <td>{t.tenant ?? "—"}</td>
                  <td>{t.member}</td>
                  <td>{t.role}</td>
                  <td title={clock(t.createdAt)}>
                    {relative(t.createdAt)}
                    {t.createdBy ? ` by ${t.createdBy}` : ""}
                  </td>
                  <td title={clock(t.expiresAt)}>{t.expiresAt === null ? "never" : clock(t.expiresAt)}</td>
                  <td title={clock(t.lastUsedAt)}>{relative(t.lastUsedAt)}</td>
                  {revoked ? <td title={clock(t.revokedAt)}>{t.revokedAt === null ? "—" : `${relative(t.revokedAt)} by ${t.revokedBy ?? "?"}`}</td> : null}
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Loaded>
    </section>
  );
}
