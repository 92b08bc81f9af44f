// Overview: whether firing is alive (the canary, as the servers view says it), then
// every biz type's counts, throughput and lateness, polled live.

import { api, enc } from "./api.js";
import { calendarPanel } from "./calendar.js";
import { fmtCount, fmtTime, h, replaceChildren, showError } from "./dom.js";
import { canaryBox } from "./servers.js";

const COLUMNS = [
  "biz type",
  "state",
  "rate limit",
  "pending",
  "dispatched",
  "dead",
  "delivered /min",
  "failed /min",
  "lateness p99",
];

export function rateLimitText(perS) {
  return perS === null || perS === undefined ? "unlimited" : `${perS}/s`;
}

export function statsRow(item) {
  const cell = (field, value, cls = "num") => h("td", { class: cls, "data-field": field }, value);
  return h(
    "tr",
    { testid: "biz-row", "data-biz-type": item.biz_type },
    h("td", {}, h("a", { href: `#/biz/${enc(item.biz_type)}` }, item.biz_type)),
    cell(
      "paused",
      h("span", { class: item.paused ? "badge paused" : "badge running" }, item.paused ? "paused" : "running"),
      "",
    ),
    cell("rate_limit", rateLimitText(item.rate_limit_per_s)),
    cell("pending", fmtCount(item.counts.pending)),
    cell("dispatched", fmtCount(item.counts.dispatched)),
    cell("dead", fmtCount(item.counts.dead)),
    cell("delivered_last_minute", fmtCount(item.delivered_last_minute)),
    cell("failed_last_minute", fmtCount(item.failed_last_minute)),
    cell("lateness_p99", item.lateness_p99_ms === null ? "—" : `${fmtCount(item.lateness_p99_ms)} ms`),
  );
}

// "Is firing alive right now?" on the first page: the canary's line, linking to the
// servers view. A token that may not read the servers sees nothing here.
async function showCanary(slot, life) {
  try {
    const servers = await api("GET", "/v1/servers");
    if (!life.alive) return;
    replaceChildren(slot, h("a", { class: "plain", href: "#/servers", testid: "overview-canary" }, canaryBox(servers.canary)));
  } catch {
    replaceChildren(slot);
  }
}

const CALENDAR_POLL_MS = 10_000; // the calendar changes as jobs come and go, slowly

export async function overviewView(main, _params, life) {
  const tbody = h("tbody", {});
  const calendar = calendarPanel();
  const updated = h("span", { class: "muted", testid: "updated-at" }, "loading…");
  const canary = h("div", {});
  replaceChildren(
    main,
    h(
      "header",
      { class: "view-head" },
      h("h1", {}, "Biz types"),
      updated,
      h("a", { class: "button", href: "#/new", testid: "new-biz-type", "data-needs": "admin" }, "New biz type"),
    ),
    canary,
    h(
      "table",
      { class: "overview", testid: "overview-table" },
      h("thead", {}, h("tr", {}, COLUMNS.map((t, i) => h("th", { class: i > 1 ? "num" : null }, t)))),
      tbody,
    ),
    h(
      "p",
      { class: "muted" },
      "Counts are the jobs in each state now; delivered and failed are callback outcomes of " +
        "the last 60 s; lateness is the p99 of first attempts over the last 5 minutes.",
    ),
    calendar.node,
  );
  life.poll(() => calendar.reload(), CALENDAR_POLL_MS); // its errors show in the stats' banner
  let failing = false;
  life.poll(async () => {
    showCanary(canary, life);
    try {
      const stats = await api("GET", "/v1/stats");
      if (!life.alive) return;
      replaceChildren(
        tbody,
        stats.items.length
          ? stats.items.map(statsRow)
          : h("tr", {}, h("td", { colspan: COLUMNS.length, class: "muted" }, "No biz type yet.")),
      );
      updated.textContent = `updated ${fmtTime(stats.at)}`;
      failing = false;
    } catch (error) {
      if (!failing) showError(error); // once, not every poll
      failing = true;
      updated.textContent = "not updating: the API answered an error";
    }
  });
}
