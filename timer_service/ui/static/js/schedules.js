// Schedules: each with its rule, its next run (polled), runs so far and its last job;
// and, for a producer, new / edit (schedule_form.js), "run now" and "skip next".

import { api, enc, query } from "./api.js";
import { confirmDialog, fmtCount, fmtRelative, fmtTime, h, replaceChildren, showError } from "./dom.js";
import { jobHref } from "./jobs_table.js";
import { editSchedule } from "./schedule_form.js";

const COLUMNS = ["biz type", "schedule", "rule", "next run", "runs", "last run", "last job", "state", ""];

function fmtDuration(ms) {
  if (ms % 86_400_000 === 0) return `${ms / 86_400_000} d`;
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms % 60_000 === 0) return `${ms / 60_000} min`;
  if (ms % 1000 === 0) return `${ms / 1000} s`;
  return `${ms} ms`;
}

export function ruleText(s) {
  if (s.cron) return `cron ${s.cron} (${s.timezone || "UTC"})`;
  const steps = s.intervals_ms.map(fmtDuration).join(", ");
  return `every ${steps}${s.intervals_ms.length > 1 ? (s.cycle ? ", cycling" : ", then stop") : ""}`;
}

const path = (s) => `/v1/schedules/${enc(s.biz_type)}/${enc(s.schedule_id)}`;

// "Run now" and "skip next", each confirmed; `done(message)` after it went through.
async function runNow(s, done) {
  const ok = await confirmDialog({
    title: `Run ${s.schedule_id} now?`,
    message: "One extra job due now with the schedule's payload; the next occurrence stays as it is.",
    confirmLabel: "Run now",
  });
  if (!ok) return;
  const job = await api("POST", `${path(s)}/run-now`);
  done(h("span", {}, "Made ", h("a", { href: jobHref(job), testid: "ran-job" }, job.job_id), "."));
}

async function skipNext(s, done) {
  const ok = await confirmDialog({
    title: `Skip the next run of ${s.schedule_id}?`,
    message: `Its job due ${fmtTime(s.next_run_at)} is cancelled; the schedule goes on with the one after.`,
    confirmLabel: "Skip it",
  });
  if (!ok) return;
  const after = await api("POST", `${path(s)}/skip-next`);
  done(`Skipped ${fmtTime(s.next_run_at)}; next run ${fmtTime(after.next_run_at)}.`);
}

function actions(s, done) {
  const act = (fn) => () => fn(s, done).catch(showError);
  const edit = async () => {
    if (await editSchedule({ stored: s })) done(`Saved ${s.schedule_id}.`);
  };
  return h(
    "td",
    {},
    h(
      "div",
      { class: "row-actions", "data-needs": "producer" },
      h("button", { onclick: act(runNow), testid: "run-now" }, "Run now"),
      h("button", { onclick: act(skipNext), testid: "skip-next", disabled: s.next_run_at === null }, "Skip next"),
      h("button", { onclick: () => edit().catch(showError), testid: "edit-schedule" }, "Edit…"),
    ),
  );
}

function scheduleRow(s, nowMs, done) {
  const next =
    s.next_run_at === null
      ? h("span", { class: "muted" }, "none")
      : [fmtTime(s.next_run_at), h("br"), h("small", { class: "muted" }, fmtRelative(s.next_run_at, nowMs))];
  return h(
    "tr",
    { testid: "schedule-row", "data-schedule-id": s.schedule_id },
    h("td", {}, h("a", { href: `#/biz/${enc(s.biz_type)}` }, s.biz_type)),
    h("td", {}, s.schedule_id),
    h("td", {}, ruleText(s)),
    h("td", { "data-field": "next_run_at" }, next),
    h("td", { class: "num" }, fmtCount(s.runs), s.max_runs ? ` / ${fmtCount(s.max_runs)}` : ""),
    h("td", {}, fmtTime(s.last_run_at)),
    h("td", {}, s.last_job_id ? h("a", { href: jobHref({ biz_type: s.biz_type, job_id: s.last_job_id }) }, s.last_job_id) : "—"),
    h("td", {}, h("span", { class: s.paused ? "badge paused" : "badge running" }, s.paused ? "paused" : "active")),
    actions(s, done),
  );
}

export async function schedulesView(main, _params, life) {
  const biz = h("select", { testid: "schedules-biz" }, h("option", { value: "" }, "all biz types"));
  const tbody = h("tbody", {});
  const note = h("p", { class: "ok-text", testid: "schedule-note" });
  const bizTypes = [];
  const create = h("button", { class: "primary", testid: "new-schedule", "data-needs": "producer" }, "New schedule…");
  replaceChildren(
    main,
    h("header", { class: "view-head" }, h("h1", {}, "Schedules"), h("label", {}, "biz type ", biz), create),
    note,
    h(
      "table",
      { class: "schedules", testid: "schedules-table" },
      h("thead", {}, h("tr", {}, COLUMNS.map((t) => h("th", {}, t)))),
      tbody,
    ),
  );
  try {
    for (const b of (await api("GET", "/v1/biz-types")).items) {
      biz.append(h("option", { value: b.biz_type }, b.biz_type));
      bizTypes.push(b.biz_type);
    }
  } catch (error) {
    showError(error);
  }
  const done = (message) => {
    replaceChildren(note, message);
    load().catch(showError);
  };
  create.addEventListener("click", async () => {
    try {
      const saved = await editSchedule({ bizTypes });
      if (saved) done(`Created ${saved.schedule_id}.`);
    } catch (error) {
      showError(error);
    }
  });
  const load = async () => {
    const page = await api("GET", `/v1/schedules${query({ biz_type: biz.value })}`);
    if (!life.alive) return;
    const nowMs = Date.now();
    replaceChildren(
      tbody,
      page.items.length
        ? page.items.map((s) => scheduleRow(s, nowMs, done))
        : h("tr", {}, h("td", { colspan: COLUMNS.length, class: "muted" }, "No schedule.")),
    );
  };
  biz.addEventListener("change", () => load().catch(showError));
  life.poll(() => load().catch(showError), 5000);
}
