/** The dashboard's shell: who is signed in, the nav, and the page for the current path. */
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ApiError, request } from "./api";
import { ErrorLine } from "./components";
import { JobPage } from "./job";
import { JobsPage } from "./jobs";
import { NodesPage } from "./nodes";
import { NotebooksPage } from "./notebooks";
import { OverviewPage } from "./overview";
import { match, navigate, onLinkClick, useLocation } from "./router";
import { ServicePage, ServicesPage } from "./services";
import { Session, mayManageTenant, maySubmit } from "./session";
import { SignIn } from "./signin";
import { SubmitPage } from "./submit";
import { TokensPage } from "./tokens";
import type { WhoAmI } from "./types";
import { UsagePage } from "./usage";

/** The nav: path, label, test id, and who sees the entry (everyone when absent). */
const NAV: [string, string, string, ((who: WhoAmI) => boolean)?][] = [
  ["/", "Overview", "nav-overview"],
  ["/jobs", "Jobs", "nav-jobs"],
  ["/submit", "Submit", "nav-submit", maySubmit],
  ["/nodes", "Nodes", "nav-nodes"],
  ["/services", "Services", "nav-services"],
  ["/usage", "Usage", "nav-usage"],
  ["/notebooks", "Notebooks", "nav-notebooks"],
  ["/tokens", "Tokens", "nav-tokens", mayManageTenant],
];

function Page({ path, query }: { path: string; query: URLSearchParams }) {
  let params: Record<string, string> | null;
  if (path === "/" || path === "") return <OverviewPage />;
  if (match("/jobs", path)) return <JobsPage query={query} />;
  if ((params = match("/jobs/:id", path))) return <JobPage id={params["id"] as string} />;
  if (match("/submit", path)) return <SubmitPage />;
  if (match("/nodes", path)) return <NodesPage />;
  if (match("/services", path)) return <ServicesPage />;
  if ((params = match("/services/:name", path))) return <ServicePage name={params["name"] as string} />;
  if (match("/usage", path)) return <UsagePage />;
  if (match("/notebooks", path)) return <NotebooksPage />;
  if (match("/tokens", path)) return <TokensPage />;
  return (
    <section data-testid="not-found">
      <h2>Not found</h2>
      <p>
        Nothing here. <a href="/">Back to the overview</a>.
      </p>
    </section>
  );
}

function isActive(href: string, path: string): boolean {
  return href === "/" ? path === "/" : path === href || path.startsWith(`${href}/`);
}

function App() {
  const { path, query } = useLocation();
  const [who, setWho] = useState<WhoAmI | null | undefined>(undefined);
  const [bootError, setBootError] = useState<unknown>(undefined);

  useEffect(() => {
    if (path === "/signin") {
      setWho(null);
      return;
    }
    if (who) return;
    let live = true;
    request("GET", "/api/v1/whoami", { allowUnauthorized: true })
      .then((res) => res.json() as Promise<WhoAmI>)
      .then((w) => {
        if (live) {
          setWho(w);
          setBootError(undefined);
        }
      })
      .catch((e: unknown) => {
        if (!live) return;
        setWho(null);
        setBootError(e);
        if (e instanceof ApiError && e.status === 401) {
          navigate(`/signin?next=${encodeURIComponent(location.pathname + location.search)}`, true);
        }
      });
    return () => {
      live = false;
    };
  }, [path, who]);

  async function signOut(): Promise<void> {
    try {
      await request("DELETE", "/web/session", { allowUnauthorized: true });
    } finally {
      setWho(null);
      navigate("/signin");
    }
  }

  if (path === "/signin") {
    return (
      <SignIn
        onSignedIn={(w) => {
          setWho(w);
          const next = query.get("next");
          navigate(next && next.startsWith("/") && !next.startsWith("//") ? next : "/", true);
        }}
      />
    );
  }
  if (!who) {
    if (bootError && !(bootError instanceof ApiError && bootError.status === 401)) {
      return (
        <main class="boot">
          <ErrorLine error={bootError} />
          <button type="button" onClick={() => location.reload()}>
            Try again
          </button>
        </main>
      );
    }
    return <p class="muted boot">Loading…</p>;
  }

  return (
    <Session.Provider value={who}>
      <header class="topbar">
        <a href="/" class="brand">
          kiban
        </a>
        <nav>
          {NAV.filter(([, , , shows]) => !shows || shows(who)).map(([href, label, testid]) => (
            <a href={href} data-testid={testid} class={isActive(href, path) ? "active" : ""} aria-current={isActive(href, path) ? "page" : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <span class="who" data-testid="whoami" data-role={who.role}>
          {who.name}
          {who.tenant ? ` · ${who.tenant}` : ""}
          {who.role !== "member" ? ` · ${who.role}` : ""}
        </span>
        <button type="button" class="link" data-testid="signout" onClick={() => void signOut()}>
          Sign out
        </button>
      </header>
      <main class="content">
        <Page path={path} query={query} />
      </main>
    </Session.Provider>
  );
}

document.addEventListener("click", onLinkClick);
const root = document.getElementById("app");
if (root) render(<App />, root);
