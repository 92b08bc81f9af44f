// The schedule editor: a dialog that PUTs a schedule (new, or a stored one replaced:
// docs/api.md "Schedules"). What it does not show (start_at, end_at) is sent as stored.

import { api, enc } from "./api.js";
import { confirmDialog, h } from "./dom.js";

function field(label, input, hint = null) {
  return h("label", { class: "field" }, h("span", {}, label), input, hint ? h("small", {}, hint) : null);
}

function parseIntervals(text) {
  const parts = text.split(",").map((p) => p.trim()).filter(Boolean);
  const values = parts.map(Number);
  return values.length && values.every((v) => Number.isInteger(v) && v >= 1) ? values : null;
}

function parsePayload(text) {
  if (!text.trim()) return { ok: true, value: undefined };
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch {
    return { ok: false };
  }
}

// The PUT body the form's inputs say, or null while they say nothing valid.
export function scheduleBody(inputs, stored) {
  const body = {};
  if (inputs.kind.value === "cron") {
    if (!inputs.cron.value.trim()) return null;
    body.cron = inputs.cron.value.trim();
    body.timezone = inputs.timezone.value.trim() || "UTC";
  } else {
    const intervals = parseIntervals(inputs.intervals.value);
    if (!intervals) return null;
    body.intervals_ms = intervals;
    body.cycle = inputs.cycle.checked;
  }
  const payload = parsePayload(inputs.payload.value);
  if (!payload.ok) return null;
  if (payload.value !== undefined) body.payload = payload.value;
  if (inputs.maxRuns.value) body.max_runs = Number(inputs.maxRuns.value);
  body.catchup = inputs.catchup.value;
  body.paused = inputs.paused.checked;
  for (const key of ["start_at", "end_at"]) if (stored && stored[key] !== null) body[key] = stored[key];
  return body;
}

// Asks for a schedule (`stored` to edit one; `bizTypes` to pick one for a new one) and
// PUTs it; the stored schedule, or null when cancelled.
export async function editSchedule({ stored = null, bizTypes = [] }) {
  const isCron = !stored || Boolean(stored.cron);
  const inputs = {
    biz: h("select", { testid: "schedule-biz" }, bizTypes.map((b) => h("option", { value: b }, b))),
    id: h("input", { required: true, pattern: "[A-Za-z0-9_.:\\-]{1,111}", testid: "schedule-id" }),
    kind: h(
      "select",
      { testid: "schedule-kind" },
      h("option", { value: "cron", selected: isCron }, "cron"),
      h("option", { value: "intervals", selected: !isCron }, "intervals"),
    ),
    cron: h("input", { value: stored?.cron || "*/5 * * * *", testid: "schedule-cron" }),
    timezone: h("input", { value: stored?.timezone || "UTC" }),
    intervals: h("input", { value: (stored?.intervals_ms || [60000]).join(", "), testid: "schedule-intervals" }),
    cycle: h("input", { type: "checkbox", checked: stored ? Boolean(stored.cycle) : true }),
    payload: h("textarea", { testid: "schedule-payload" }),
    maxRuns: h("input", { type: "number", min: 1, value: stored?.max_runs ?? "" }),
    catchup: h("select", {}, ["skip", "one", "all"].map((c) => h("option", { value: c, selected: stored?.catchup === c }, c))),
    paused: h("input", { type: "checkbox", checked: Boolean(stored?.paused), testid: "schedule-paused" }),
  };
  inputs.payload.value = stored && stored.payload !== null ? JSON.stringify(stored.payload, null, 2) : "";
  const cronFields = [field("cron expression", inputs.cron), field("timezone", inputs.timezone)];
  const intervalFields = [
    field("intervals (ms, comma-separated)", inputs.intervals),
    h("label", {}, inputs.cycle, " cycle through the intervals"),
  ];
  const showRule = () => {
    for (const node of cronFields) node.hidden = inputs.kind.value !== "cron";
    for (const node of intervalFields) node.hidden = inputs.kind.value === "cron";
  };
  inputs.kind.addEventListener("change", showRule);
  showRule();
  const form = h(
    "div",
    { class: "schedule-fields" },
    stored ? null : field("biz type", inputs.biz),
    stored ? null : field("schedule id", inputs.id),
    field("rule", inputs.kind),
    cronFields,
    intervalFields,
    field("payload (JSON)", inputs.payload),
    field("max runs", inputs.maxRuns),
    field("catch-up after an outage or a pause", inputs.catchup),
    h("label", {}, inputs.paused, " paused"),
  );
  const biz = () => (stored ? stored.biz_type : inputs.biz.value);
  const id = () => (stored ? stored.schedule_id : inputs.id.value.trim());
  const ok = await confirmDialog({
    title: stored ? `Edit schedule ${stored.schedule_id}` : "New schedule",
    message: "PUT /v1/schedules/{biz type}/{schedule id}: a changed rule moves the next occurrence.",
    body: form,
    confirmLabel: stored ? "Save" : "Create",
    canConfirm: () => Boolean(biz() && id() && scheduleBody(inputs, stored)),
  });
  if (!ok) return null;
  return api("PUT", `/v1/schedules/${enc(biz())}/${enc(id())}`, scheduleBody(inputs, stored));
}
