/** Who is signed in: read once from `/api/v1/whoami`, shared by the nav and the controls each
 * role may use (the server refuses the rest all the same; these only hide what would fail). */
import { createContext } from "preact";
import { useContext } from "preact/hooks";
import type { WhoAmI } from "./types";

export const Session = createContext<WhoAmI | null>(null);

export function useWhoAmI(): WhoAmI | null {
  return useContext(Session);
}

/** Submit jobs, start notebooks, manage one's own work: every role but a viewer. */
export function maySubmit(who: WhoAmI | null): boolean {
  return who !== null && who.role !== "viewer";
}

/** Their tenant's tokens and queues: an admin, or a tenant-admin. */
export function mayManageTenant(who: WhoAmI | null): boolean {
  return who !== null && (who.role === "admin" || who.role === "tenant-admin");
}

/** Cancel or checkpoint a job: its submitter (a member), a tenant-admin or an admin. */
export function mayManageJob(who: WhoAmI | null, submittedBy: string | null | undefined): boolean {
  if (who === null || who.role === "viewer") return false;
  if (who.role === "member") return submittedBy === (who.member ?? who.name);
  return true;
}
