// A biz type's page: live numbers, pause / resume, the config form, then its jobs
// (dead letters, search, bulk actions: biz_jobs.js). And the page that creates one.

import { api, enc } from "./api.js";
import { configForm, createBizType, saveBizType, setPaused } from "./biz_config.js";
import { deadLettersSection, searchSection } from "./biz_jobs.js";
import { calendarPanel } from "./calendar.js";
import { fmtCount, fmtTime, h, replaceChildren, showError } from "./dom.js";
import { rateLimitText } from "./overview.js";
import { seriesPanel } from "./series.js";

const SERIES_POLL_MS = 10_000; // a minute's point moves slowly; the read is the hour's

function stat(label, field) {
  const value = h("strong", { "data-field": field }, "—");
  return [h("div", { class: "stat" }, h("span", {}, label), value), value];
}

function statsPanel() {
  const fields = [
    ["pending", "pending"],
    ["dispatched", "dispatched"],
    ["delivered", "delivered"],
    ["dead", "dead"],
    ["cancelled", "cancelled"],
    ["delivered /min", "delivered_last_minute"],
    ["failed /min", "failed_last_minute"],
    ["lateness p99", "lateness_p99"],
  ];
  const values = {};
  const node = h(
    "div",
    { class: "stats", testid: "biz-stats" },
    fields.map(([label, field]) => {
      const [box, value] = stat(label, field);
      values[field] = value;
      return box;
    }),
  );
  const update = (item) => {
    for (const [state, n] of Object.entries(item.counts)) {
      if (values[state]) values[state].textContent = fmtCount(n);
    }
    values.delivered_last_minute.textContent = fmtCount(item.delivered_last_minute);
    values.failed_last_minute.textContent = fmtCount(item.failed_last_minute);
    values.lateness_p99.textContent =
      item.lateness_p99_ms === null ? "—" : `${fmtCount(item.lateness_p99_ms)} ms`;
  };
  return { node, update };
}

export async function bizTypeView(main, [name], life) {
  let config;
  try {
    config = await api("GET", `/v1/biz-types/${enc(name)}`);
  } catch (error) {
    showError(error);
    replaceChildren(main, h("h1", {}, name), h("p", {}, h("a", { href: "#/" }, "Back to the overview")));
    return;
  }
  const badge = h("span", { class: "badge", testid: "paused-badge" });
  const toggle = h("button", { testid: "pause-toggle", "data-needs": "operator" });
  const summary = h("p", { class: "muted", testid: "biz-summary" });
  const formSlot = h("div", {});
  const stats = statsPanel();
  const series = seriesPanel(name);
  const calendar = calendarPanel(name);

  const show = (saved) => {
    config = saved;
    badge.textContent = config.paused ? "paused" : "running";
    badge.className = `badge ${config.paused ? "paused" : "running"}`;
    toggle.textContent = config.paused ? "Resume…" : "Pause…";
    summary.textContent =
      `callbacks to ${config.callback_url}, ${rateLimitText(config.rate_limit_per_s)}, ` +
      `${config.has_signing_secret ? "signed" : "unsigned"}, updated ${fmtTime(config.updated_at)}`;
    replaceChildren(formSlot, configForm(config, save));
  };

  const saveWith = async (write) => {
    try {
      const saved = await write();
      if (saved) show(saved);
    } catch (error) {
      showError(error);
    }
  };
  const save = (_name, body) => saveWith(() => saveBizType({ name, body, stored: config }));
  toggle.addEventListener("click", () => saveWith(() => setPaused({ name, paused: !config.paused })));

  const deadLetters = deadLettersSection(name, () => search.reload());
  const search = searchSection(name, () => deadLetters.reload());
  replaceChildren(
    main,
    h(
      "header",
      { class: "view-head" },
      h("h1", { testid: "biz-title" }, name),
      badge,
      toggle,
      h("a", { href: "#/" }, "all biz types"),
    ),
    summary,
    stats.node,
    series.node,
    calendar.node,
    h("details", { class: "panel", testid: "config-panel" }, h("summary", {}, "Config"), formSlot),
    deadLetters.node,
    search.node,
  );
  show(config);
  let failing = false;
  life.poll(async () => {
    try {
      const item = await api("GET", `/v1/biz-types/${enc(name)}/stats`);
      if (life.alive) stats.update(item);
      failing = false;
    } catch (error) {
      if (!failing) showError(error); // once, not every poll
      failing = true;
    }
  });
  life.poll(() => series.reload(), SERIES_POLL_MS); // its errors show in the stats' banner
  life.poll(() => calendar.reload(), SERIES_POLL_MS);
}

export async function newBizTypeView(main) {
  const create = async (name, body) => {
    try {
      const saved = await createBizType({ name, body });
      if (saved) window.location.hash = `#/biz/${enc(name)}`;
    } catch (error) {
      showError(error);
    }
  };
  replaceChildren(main, h("h1", {}, "New biz type"), configForm(null, create));
}
