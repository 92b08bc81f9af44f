// The console's router: one view at a time in <main>, chosen by the URL's hash; a view
// gets a `life` whose timers stop when the operator leaves it.

import { auditView } from "./audit.js";
import { bizTypeView, newBizTypeView } from "./biz_type.js";
import { clearError, h, replaceChildren } from "./dom.js";
import { jobView } from "./job.js";
import { overviewView } from "./overview.js";
import { schedulesView } from "./schedules.js";
import { serversView } from "./servers.js";
import { whoami } from "./whoami.js";

export const POLL_INTERVAL_MS = 3000;

const ROUTES = [
  [/^#?\/?$/, overviewView, "overview"],
  [/^#\/new$/, newBizTypeView, "overview"],
  [/^#\/biz\/([^/]+)$/, bizTypeView, "overview"],
  [/^#\/job(?:\/([^/]+)\/([^/]+))?$/, jobView, "job"],
  [/^#\/schedules$/, schedulesView, "schedules"],
  [/^#\/audit$/, auditView, "audit"],
  [/^#\/servers$/, serversView, "servers"],
];

// What a view may start that must stop when it is left.
class Life {
  constructor() {
    this.alive = true;
    this.timers = new Set();
  }

  // Calls `fn` now and then every `intervalMs` after each call ends (never overlapping);
  // skipped while the tab is hidden.
  poll(fn, intervalMs = POLL_INTERVAL_MS) {
    const tick = async () => {
      if (!this.alive) return;
      if (!document.hidden) {
        try {
          await fn();
        } catch {
          // the view shows its own errors; polling goes on
        }
      }
      if (this.alive) this.timers.add(setTimeout(tick, intervalMs));
    };
    tick();
  }

  end() {
    this.alive = false;
    for (const timer of this.timers) clearTimeout(timer);
  }
}

let life = null;

async function route() {
  if (life) life.end();
  life = new Life();
  clearError();
  const hash = window.location.hash || "#/";
  const main = document.getElementById("view");
  for (const [pattern, view, tab] of ROUTES) {
    const match = hash.match(pattern);
    if (!match) continue;
    for (const link of document.querySelectorAll("nav a")) {
      link.classList.toggle("active", link.dataset.tab === tab);
    }
    const params = match.slice(1).map((p) => (p === undefined ? undefined : decodeURIComponent(p)));
    main.replaceChildren();
    main.dataset.view = tab;
    await view(main, params, life);
    return;
  }
  replaceChildren(main, h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/" }, "Back to the overview")));
}

window.addEventListener("hashchange", route);
whoami().finally(route); // the role first, so a view never flashes an action it hides
