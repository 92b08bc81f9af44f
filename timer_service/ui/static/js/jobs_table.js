// Tables of jobs and of a job's attempts; a job row expands to its attempt history.

import { answerCell } from "./answers.js";
import { enc } from "./api.js";
import { fmtTime, h, labelChips } from "./dom.js";

export function jobHref(job) {
  return `#/job/${enc(job.biz_type)}/${enc(job.job_id)}`;
}

// `answers`: add what the endpoint answered to each attempt (a job read alone carries it;
// listings do not).
export function historyTable(history, { answers = false } = {}) {
  if (!history || history.length === 0) return h("p", { class: "muted" }, "No attempt yet.");
  const columns = ["#", "sent at", "status", "error", "duration", ...(answers ? ["answer"] : [])];
  return h(
    "table",
    { class: "history", testid: "history" },
    h("thead", {}, h("tr", {}, columns.map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      history.map((a) =>
        h(
          "tr",
          { testid: "attempt-row", "data-attempt": a.attempt },
          h("td", { class: "num" }, a.attempt),
          h("td", {}, fmtTime(a.at)),
          h("td", { class: "num" }, a.status_code ?? "—"),
          a.error ? h("td", { class: "error-text" }, a.error) : h("td", { class: "ok-text" }, "ok"),
          h("td", { class: "num" }, `${a.duration_ms} ms`),
          answers ? answerCell(a) : null,
        ),
      ),
    ),
  );
}

export function jobsTable(jobs) {
  const columns = ["job id", "state", "labels", "due", "attempts", "last error", ""];
  return h(
    "table",
    { class: "jobs", testid: "jobs-table" },
    h("thead", {}, h("tr", {}, columns.map((t) => h("th", {}, t)))),
    jobs.map(jobRows),
  );
}

function jobRows(job) {
  const detail = h(
    "tr",
    { class: "detail", hidden: true },
    h("td", { colspan: 7 }, historyTable(job.history)),
  );
  const toggle = h(
    "button",
    {
      class: "link",
      testid: "toggle-history",
      onclick: () => {
        detail.hidden = !detail.hidden;
        toggle.textContent = detail.hidden ? "history ▸" : "history ▾";
      },
    },
    "history ▸",
  );
  return h(
    "tbody",
    { testid: "job-row", "data-job-id": job.job_id },
    h(
      "tr",
      {},
      h("td", {}, h("a", { href: jobHref(job) }, job.job_id)),
      h("td", {}, h("span", { class: `state state-${job.state}` }, job.state)),
      h("td", {}, labelChips(job.labels)),
      h("td", {}, fmtTime(job.due_at)),
      h("td", { class: "num" }, job.attempts),
      h("td", { class: "error-text" }, job.last_error ?? ""),
      h("td", {}, toggle),
    ),
    detail,
  );
}
