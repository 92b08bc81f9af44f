// A biz type's jobs: its dead letters, and a search whose filter the bulk actions use.

import { api, query } from "./api.js";
import { runBulk } from "./bulk.js";
import { h, showError, utcInputToMs } from "./dom.js";
import { jobsTable } from "./jobs_table.js";
import { pager } from "./pager.js";

export const PAGE_SIZE = 50;
const STATES = ["", "pending", "dispatched", "delivered", "dead", "cancelled"];

function listJobs(params) {
  return (cursor) => api("GET", `/v1/jobs${query({ ...params, limit: PAGE_SIZE, cursor })}`);
}

// Both sections return {node, reload}; `onChanged` runs after a bulk action changed jobs.
export function deadLettersSection(bizType, onChanged) {
  const list = pager({
    load: listJobs({ biz_type: bizType, state: "dead" }),
    render: jobsTable,
    testid: "dead-letters",
    empty: "No dead job.",
  });
  const replayAll = h("button", { testid: "replay-all-dead", "data-needs": "operator" }, "Replay all dead…");
  const progress = h("div", { class: "bulk-progress", testid: "dead-bulk-progress" });
  replayAll.addEventListener("click", async () => {
    replayAll.disabled = true;
    try {
      if (await runBulk("replay", { biz_type: bizType }, progress)) onChanged();
      list.reload();
    } finally {
      replayAll.disabled = false;
    }
  });
  list.reload();
  const node = h(
    "section",
    { class: "panel", testid: "dead-letters-section" },
    h(
      "header",
      { class: "section-head" },
      h("h2", {}, "Dead letters"),
      h("button", { onclick: () => list.reload(), testid: "dead-letters-refresh" }, "Refresh"),
      replayAll,
    ),
    progress,
    list.node,
  );
  return { node, reload: list.reload };
}

// "k:v, k2:v2" -> ["k:v", "k2:v2"]
function labelTerms(text) {
  return text
    .split(",")
    .map((t) => t.trim())
    .filter(Boolean);
}

function labelObject(terms) {
  const labels = {};
  for (const term of terms) {
    const at = term.indexOf(":");
    if (at < 1) throw { title: "Bad label filter", detail: `${JSON.stringify(term)} is not key:value` };
    labels[term.slice(0, at)] = term.slice(at + 1);
  }
  return labels;
}

export function searchSection(bizType, onChanged) {
  const state = h("select", { name: "state", testid: "search-state" }, STATES.map((s) => h("option", { value: s }, s || "any")));
  const labels = h("input", { name: "label", placeholder: "tenant:acme, region:eu", testid: "search-label" });
  const prefix = h("input", { name: "job_id_prefix", placeholder: "order-", testid: "search-prefix" });
  const dueAfter = h("input", { type: "datetime-local", step: 1, testid: "search-due-after" });
  const dueBefore = h("input", { type: "datetime-local", step: 1, testid: "search-due-before" });
  const progress = h("div", { class: "bulk-progress", testid: "bulk-progress" });

  const filter = () => ({
    biz_type: bizType,
    state: state.value || null,
    labels: labelTerms(labels.value),
    job_id_prefix: prefix.value || null,
    due_after: utcInputToMs(dueAfter.value),
    due_before: utcInputToMs(dueBefore.value),
  });
  let current = filter();
  const results = pager({
    load: (cursor) => {
      const f = current;
      return listJobs({ ...f, labels: undefined, label: f.labels })(cursor);
    },
    render: jobsTable,
    testid: "search-results",
    empty: "No job matches.",
    idle: "Choose a filter and press Search.",
  });

  const bulkFilter = () => {
    const f = filter();
    const out = { biz_type: bizType };
    if (f.state) out.state = f.state;
    if (f.labels.length) out.labels = labelObject(f.labels);
    if (f.job_id_prefix) out.job_id_prefix = f.job_id_prefix;
    if (f.due_after !== null) out.due_after = f.due_after;
    if (f.due_before !== null) out.due_before = f.due_before;
    return out;
  };
  const bulkButton = (action, label) => {
    const button = h("button", { type: "button", testid: `bulk-${action}`, "data-needs": "operator" }, label);
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        if (await runBulk(action, bulkFilter(), progress)) onChanged();
        results.reload();
      } catch (error) {
        showError(error);
      } finally {
        button.disabled = false;
      }
    });
    return button;
  };

  const form = h(
    "form",
    {
      class: "search",
      testid: "search-form",
      onsubmit: (event) => {
        event.preventDefault();
        current = filter();
        results.reload();
      },
    },
    h("label", {}, "state ", state),
    h("label", {}, "labels ", labels),
    h("label", {}, "job id prefix ", prefix),
    h("label", {}, "due from (UTC) ", dueAfter),
    h("label", {}, "due before (UTC) ", dueBefore),
    h("button", { class: "primary", testid: "search-submit" }, "Search"),
    bulkButton("replay", "Bulk replay…"),
    bulkButton("cancel", "Bulk cancel…"),
  );
  // No search until asked: the first paint of the page waits for the dead letters only.
  const node = h(
    "section",
    { class: "panel", testid: "search-section" },
    h("h2", {}, "Search jobs"),
    h(
      "p",
      { class: "muted" },
      "Bulk actions use the filter in the form (replay takes dead jobs; cancel takes pending " +
        "and dispatched ones not yet sending) and show the count before anything changes.",
    ),
    form,
    progress,
    results.node,
  );
  return { node, reload: results.reload };
}
