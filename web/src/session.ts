/** Who is signed in: read once from `/api/v1/whoami`, shared by the nav and admin-only controls. */
import { createContext } from "preact";
import { useContext } from "preact/hooks";
import type { WhoAmI } from "./types";

export const Session = createContext<WhoAmI | null>(null);

export function useWhoAmI(): WhoAmI | null {
  return useContext(Session);
}
