/** Live data: fetch now, then again every 2 s while the page is visible (at most one request
 * in flight); a hidden tab polls nothing and catches up the moment it is shown again. */
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { messageOf } from "./api";

export const LIVE_INTERVAL_MS = 2000;

export interface Live<T> {
  data: T | undefined;
  error: unknown;
  refresh: () => void;
}

export function useLive<T>(load: () => Promise<T>, deps: unknown[], intervalMs = LIVE_INTERVAL_MS): Live<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const generation = useRef(0);
  const busy = useRef(false);
  const loadRef = useRef(load);
  loadRef.current = load;

  const tick = useCallback(async (force: boolean) => {
    if (busy.current && !force) return;
    const mine = generation.current;
    busy.current = true;
    try {
      const value = await loadRef.current();
      if (mine === generation.current) {
        setData(value);
        setError(undefined);
      }
    } catch (e) {
      if (mine === generation.current) setError(e);
    } finally {
      if (mine === generation.current) busy.current = false;
    }
  }, []);

  useEffect(() => {
    generation.current++;
    busy.current = false;
    void tick(true);
    const timer = window.setInterval(() => {
      if (document.visibilityState === "visible") void tick(false);
    }, intervalMs);
    const onVisible = (): void => {
      if (document.visibilityState === "visible") void tick(false);
    };
    document.addEventListener("visibilitychange", onVisible);
    return () => {
      generation.current++;
      window.clearInterval(timer);
      document.removeEventListener("visibilitychange", onVisible);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);

  return { data, error, refresh: () => void tick(true) };
}

export { messageOf };
