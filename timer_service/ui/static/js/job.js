// Job lookup by (biz type, job id): the whole resource, its attempt history, and
// cancel / replay when its state allows, and why it is late when it is.

import { api, enc } from "./api.js";
import { confirmDialog, fmtJson, fmtRelative, fmtTime, h, labelChips, replaceChildren, showError } from "./dom.js";
import { historyTable, jobHref } from "./jobs_table.js";
import { whyLateLine } from "./why_late.js";

const CANCELLABLE = new Set(["pending", "dispatched"]);

function lookupForm(bizTypes, bizType, jobId) {
  const biz = h(
    "select",
    { name: "biz_type", required: true, testid: "lookup-biz" },
    bizTypes.map((b) => h("option", { value: b.biz_type, selected: b.biz_type === bizType }, b.biz_type)),
  );
  const id = h("input", { name: "job_id", value: jobId || "", required: true, size: 40, testid: "lookup-id" });
  return h(
    "form",
    {
      class: "search",
      testid: "lookup-form",
      onsubmit: (event) => {
        event.preventDefault();
        window.location.hash = jobHref({ biz_type: biz.value, job_id: id.value.trim() });
      },
    },
    h("label", {}, "biz type ", biz),
    h("label", {}, "job id ", id),
    h("button", { class: "primary", testid: "lookup-submit" }, "Look up"),
  );
}

function row(label, value, field) {
  return h("tr", {}, h("th", {}, label), h("td", { "data-field": field }, value));
}

function jobDetails(job, onChange) {
  const act = async (verb, method, path) => {
    const ok = await confirmDialog({
      title: `${verb} ${job.job_id}?`,
      message: `${method} ${path}`,
      confirmLabel: verb,
    });
    if (!ok) return;
    try {
      onChange(await api(method, path));
    } catch (error) {
      showError(error);
    }
  };
  const path = `/v1/jobs/${enc(job.biz_type)}/${enc(job.job_id)}`;
  const buttons = [];
  if (CANCELLABLE.has(job.state)) {
    buttons.push(h("button", { testid: "job-cancel", "data-needs": "producer", onclick: () => act("Cancel", "DELETE", path) }, "Cancel…"));
  }
  if (job.state === "dead") {
    buttons.push(h("button", { testid: "job-replay", "data-needs": "operator", onclick: () => act("Replay", "POST", `${path}/replay`) }, "Replay…"));
  }
  return h(
    "div",
    { testid: "job-details" },
    h(
      "header",
      { class: "view-head" },
      h("h2", {}, job.job_id),
      h("span", { class: `state state-${job.state}`, testid: "job-state" }, job.state),
      buttons,
    ),
    whyLateLine(job),
    h(
      "table",
      { class: "kv" },
      row("biz type", h("a", { href: `#/biz/${enc(job.biz_type)}` }, job.biz_type), "biz_type"),
      row("due", `${fmtTime(job.due_at)} (${fmtRelative(job.due_at)})`, "due_at"),
      row("next attempt", fmtTime(job.next_attempt_at), "next_attempt_at"),
      row("attempts", job.attempts, "attempts"),
      row("last error", job.last_error ?? "—", "last_error"),
      row("labels", labelChips(job.labels), "labels"),
      row("created", fmtTime(job.created_at), "created_at"),
      row("updated", fmtTime(job.updated_at), "updated_at"),
      row("delivered", fmtTime(job.delivered_at), "delivered_at"),
      row("payload", h("pre", {}, fmtJson(job.payload)), "payload"),
    ),
    h("h3", {}, "Attempts"),
    historyTable(job.history, { answers: true }),
  );
}

export async function jobView(main, [bizType, jobId]) {
  const slot = h("div", {});
  let bizTypes = [];
  try {
    bizTypes = (await api("GET", "/v1/biz-types")).items;
  } catch (error) {
    showError(error);
  }
  replaceChildren(main, h("h1", {}, "Job lookup"), lookupForm(bizTypes, bizType, jobId), slot);
  if (!bizType || !jobId) return;
  const show = (job) => replaceChildren(slot, jobDetails(job, show));
  try {
    show(await api("GET", `/v1/jobs/${enc(bizType)}/${enc(jobId)}`));
  } catch (error) {
    showError(error);
  }
}
