// Servers: is firing alive (the canary), which daemon owns which partition, which
// broker consumes which biz type and what it holds (GET /v1/servers), polled live.

import { api } from "./api.js";
import { fmtCount, fmtTime, h, replaceChildren, showError } from "./dom.js";

function fmtAge(ms) {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60_000)} min`;
}

function fmtLeft(ms) {
  return ms > 0 ? `in ${fmtAge(ms)}` : `${fmtAge(-ms)} ago`;
}

function liveBadge(live, yes = "live", no = "lapsed") {
  return h("span", { class: live ? "badge running" : "badge paused" }, live ? yes : no);
}

export function canaryBox(canary) {
  if (!canary.enabled) {
    return h(
      "div",
      { class: "canary off", testid: "canary", "data-state": "off" },
      h("strong", {}, "Canary off"),
      h("span", { class: "muted" }, " — TIMER_CANARY_INTERVAL_MS is 0: nothing here tells that firing is alive."),
    );
  }
  const state = canary.alive ? "alive" : "stale";
  return h(
    "div",
    { class: `canary ${state}`, testid: "canary", "data-state": state },
    h("strong", {}, canary.alive ? "Firing is alive" : "No canary for three intervals: firing may have stopped"),
    h(
      "span",
      {},
      canary.last_success_at === null
        ? ` — none in the last ${fmtAge(canary.lookback_ms)} (as far as the store is searched)`
        : ` — last canary ${fmtAge(canary.age_ms)} ago (${fmtTime(canary.last_success_at)}), one every ${fmtAge(canary.interval_ms)}`,
    ),
  );
}

function daemonsTable(daemons) {
  const rows = daemons.items.flatMap((d) =>
    d.partitions.map((p, i) =>
      h(
        "tr",
        { testid: "daemon-row", "data-holder": d.holder, "data-partition": p.partition },
        i === 0 ? h("td", { rowspan: d.partitions.length }, d.holder, " ", liveBadge(d.live)) : null,
        h("td", { class: "num" }, p.partition),
        h("td", { class: "num" }, p.fence),
        h("td", {}, fmtTime(p.expires_at), h("br"), h("small", { class: "muted" }, fmtLeft(p.left_ms))),
        h("td", {}, liveBadge(!p.lapsed, "held")),
      ),
    ),
  );
  return h(
    "table",
    { testid: "daemons-table" },
    h("thead", {}, h("tr", {}, ["daemon", "partition", "fence", "lease expires", "lease"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      rows.length ? rows : h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No daemon has taken a partition.")),
    ),
  );
}

function brokersTable(brokers) {
  const rows = brokers.map((b) =>
    h(
      "tr",
      { testid: "broker-row", "data-broker-id": b.broker_id },
      h("td", {}, b.broker_id, " ", liveBadge(!b.lapsed)),
      h("td", {}, fmtTime(b.expires_at), h("br"), h("small", { class: "muted" }, fmtLeft(b.left_ms))),
      h("td", {}, b.consuming.length ? b.consuming.map((c) => h("span", { class: "chip" }, c)) : "—"),
      h(
        "td",
        {},
        b.held.length
          ? b.held.map((x) =>
              h("div", {}, `${x.biz_type}: ${fmtCount(x.messages)} held, oldest ${fmtAge(x.oldest_age_ms)}`),
            )
          : h("span", { class: "muted" }, "nothing held"),
      ),
    ),
  );
  return h(
    "table",
    { testid: "brokers-table" },
    h("thead", {}, h("tr", {}, ["broker", "heartbeat expires", "consuming", "held"].map((t) => h("th", {}, t)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No broker has beaten."))),
  );
}

export async function serversView(main, _params, life) {
  const updated = h("span", { class: "muted", testid: "updated-at" }, "loading…");
  const body = h("div", {});
  replaceChildren(main, h("header", { class: "view-head" }, h("h1", {}, "Servers"), updated), body);
  let failing = false;
  life.poll(async () => {
    try {
      const s = await api("GET", "/v1/servers");
      if (!life.alive) return;
      const unowned = s.daemons.unowned;
      replaceChildren(
        body,
        canaryBox(s.canary),
        h("h2", { class: "sub" }, `Daemons · ${s.daemons.partitions} partition${s.daemons.partitions === 1 ? "" : "s"}`),
        unowned.length
          ? h("p", { class: "why-late", testid: "unowned" }, `No live daemon owns partition ${unowned.join(", ")}: its jobs do not fire.`)
          : null,
        daemonsTable(s.daemons),
        h("h2", { class: "sub" }, "Brokers"),
        brokersTable(s.brokers),
        h("p", { class: "muted" }, "A broker lists only the biz types your token covers."),
      );
      updated.textContent = `updated ${fmtTime(s.at)}`;
      failing = false;
    } catch (error) {
      if (!failing) showError(error);
      failing = true;
      updated.textContent = "not updating: the API answered an error";
    }
  });
}
