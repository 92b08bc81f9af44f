// The audit log, newest first, paged by the server; filtered by biz type and action.

import { api, enc, query } from "./api.js";
import { fmtCount, fmtTime, h, replaceChildren, showError } from "./dom.js";
import { jobHref } from "./jobs_table.js";
import { pager } from "./pager.js";

export const AUDIT_PAGE_SIZE = 50;
const ACTIONS = [
  "job.cancel",
  "job.replay",
  "job.reschedule",
  "jobs.bulk_cancel",
  "jobs.bulk_replay",
  "biz_type.put",
  "biz_type.patch",
  "biz_type.delete",
  "biz_type.rotate_secret",
  "schedule.put",
  "schedule.delete",
  "schedule.run_now",
  "schedule.skip_next",
  "token.create",
  "token.delete",
];
const COLUMNS = ["at", "actor", "action", "biz type", "target", "count", "detail"];

function compact(value) {
  return value === null || value === undefined ? "" : JSON.stringify(value);
}

function auditRow(e) {
  const target = e.job_id
    ? h("a", { href: jobHref({ biz_type: e.biz_type, job_id: e.job_id }) }, e.job_id)
    : h("code", {}, compact(e.filter));
  return h(
    "tr",
    { testid: "audit-row", "data-action": e.action, "data-biz-type": e.biz_type },
    h("td", {}, fmtTime(e.at)),
    h("td", {}, e.actor),
    h("td", {}, h("span", { class: "action" }, e.action)),
    h("td", {}, h("a", { href: `#/biz/${enc(e.biz_type)}` }, e.biz_type)),
    h("td", {}, target),
    h("td", { class: "num", "data-field": "count" }, e.count === null ? "" : fmtCount(e.count)),
    h("td", {}, h("code", { class: "detail" }, compact(e.detail))),
  );
}

function auditTable(items) {
  return h(
    "table",
    { class: "audit", testid: "audit-table" },
    h("thead", {}, h("tr", {}, COLUMNS.map((t) => h("th", {}, t)))),
    h("tbody", {}, items.map(auditRow)),
  );
}

export async function auditView(main) {
  const biz = h("select", { testid: "audit-biz" }, h("option", { value: "" }, "all biz types"));
  const action = h(
    "select",
    { testid: "audit-action" },
    h("option", { value: "" }, "all actions"),
    ACTIONS.map((a) => h("option", { value: a }, a)),
  );
  const list = pager({
    load: (cursor) =>
      api(
        "GET",
        `/v1/audit${query({ biz_type: biz.value, action: action.value, limit: AUDIT_PAGE_SIZE, cursor })}`,
      ),
    render: auditTable,
    testid: "audit",
    empty: "No audit entry.",
  });
  replaceChildren(
    main,
    h(
      "header",
      { class: "view-head" },
      h("h1", {}, "Audit log"),
      h("label", {}, "biz type ", biz),
      h("label", {}, "action ", action),
      h("button", { onclick: () => list.reload(), testid: "audit-refresh" }, "Refresh"),
    ),
    h("p", { class: "muted" }, "Every operator action, newest first: who, what, on which jobs, when."),
    list.node,
  );
  biz.addEventListener("change", () => list.reload());
  action.addEventListener("change", () => list.reload());
  try {
    for (const b of (await api("GET", "/v1/biz-types")).items) {
      biz.append(h("option", { value: b.biz_type }, b.biz_type));
    }
  } catch (error) {
    showError(error);
  }
  list.reload();
}
