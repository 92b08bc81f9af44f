// The load calendar (GET /v1/calendar): how many pending jobs are due in each step
// ahead, as bars over the next minutes, hour, day or week, with the total and the peak.
// On the overview it counts every biz type; on a biz type's page, that biz type only.

import { ApiError, api, query } from "./api.js";
import { chart, legend } from "./charts.js";
import { fmtCount, h, replaceChildren, showError } from "./dom.js";

const iso = (ms) => new Date(ms).toISOString();

// Each range: its step and number of steps (at most the API's 2,000), and how its times
// read on the axis (UTC, as the API speaks them).
export const RANGES = [
  { key: "10m", text: "next 10 min", stepMs: 10_000, steps: 60, label: (ms) => iso(ms).slice(11, 19) },
  { key: "1h", text: "next hour", stepMs: 60_000, steps: 60, label: (ms) => iso(ms).slice(11, 16) },
  { key: "1d", text: "next day", stepMs: 600_000, steps: 144, label: (ms) => iso(ms).slice(11, 16) },
  {
    key: "7d",
    text: "next 7 days",
    stepMs: 3_600_000,
    steps: 168,
    label: (ms) => `${iso(ms).slice(5, 10)} ${iso(ms).slice(11, 13)}h`,
  },
];

// The window a range covers from `nowMs`: steps aligned on the step, the first holding now.
export function rangeWindow(range, nowMs) {
  const from = Math.floor(nowMs / range.stepMs) * range.stepMs;
  return { from, to: from + range.steps * range.stepMs };
}

// The total and the busiest step (the earliest of equals); null when nothing is due.
export function peakOf(buckets) {
  let total = 0;
  let peak = null;
  for (const b of buckets) {
    total += b.due;
    if (b.due > 0 && (peak === null || b.due > peak.due)) peak = b;
  }
  return { total, peak };
}

function summaryText(range, total, peak) {
  if (peak === null) return `Nothing due in the ${range.text}.`;
  return (
    `${fmtCount(total)} due in the ${range.text}; the peak is ${range.label(peak.at)} UTC ` +
    `with ${fmtCount(peak.due)} in ${range.stepMs / 1000} s.`
  );
}

// `bizType`: null for every biz type. Returns the panel's node and its `reload`.
export function calendarPanel(bizType = null) {
  let range = RANGES[1];
  const figureSlot = h("div", { class: "charts" }, h("p", { class: "muted" }, "loading…"));
  const summary = h("p", { testid: "calendar-summary" });
  const buttons = RANGES.map((r) => {
    const button = h("button", { type: "button", testid: `calendar-range-${r.key}` }, r.text);
    button.addEventListener("click", () => {
      range = r;
      reload().catch(showError);
    });
    return button;
  });
  const node = h(
    "section",
    { class: "panel", testid: "calendar-panel" },
    h("h2", {}, bizType === null ? "Due ahead, every biz type" : "Due ahead"),
    h("div", { class: "row-actions" }, buttons),
    summary,
    figureSlot,
    h(
      "p",
      { class: "muted" },
      "Pending jobs by the moment they fire (a flexible job's chosen moment), as the store " +
        "holds them now: jobs created, cancelled or rescheduled later change it.",
    ),
  );
  const reload = async () => {
    const shown = range;
    const { from, to } = rangeWindow(shown, Date.now());
    const params = { from, to, step_ms: shown.stepMs };
    if (bizType !== null) params.biz_type = bizType;
    let data;
    try {
      data = await api("GET", `/v1/calendar${query(params)}`);
    } catch (error) {
      // A token for some biz types only may not read every biz type's calendar: say so
      // here instead of a banner every poll (its biz types' pages show theirs).
      if (!(error instanceof ApiError) || error.status >= 500) throw error;
      summary.textContent = error.detail || error.title;
      replaceChildren(figureSlot);
      return;
    }
    if (shown !== range) return; // another range was picked meanwhile
    buttons.forEach((b, i) => b.classList.toggle("selected", RANGES[i] === shown));
    const { total, peak } = peakOf(data.buckets);
    summary.textContent = summaryText(shown, total, peak);
    summary.dataset.total = String(total);
    summary.dataset.peakAt = peak === null ? "" : String(peak.at);
    const series = [{ name: "due", cls: "s-accent", values: data.buckets.map((b) => b.due) }];
    const title = `Jobs due per ${shown.stepMs / 1000} s, ${shown.text}`;
    replaceChildren(
      figureSlot,
      h(
        "figure",
        { class: "chart-box", testid: "chart-calendar", "data-range": shown.key },
        h("figcaption", {}, title),
        chart({ title, times: data.buckets.map((b) => b.at), series, kind: "bars", label: shown.label }),
        legend(series),
      ),
    );
  };
  return { node, reload };
}
