// A biz type's last hour per minute (GET /v1/biz-types/{biz}/series): delivered and
// failed as stacked bars, lateness p50 / p99 as lines.

import { api, enc } from "./api.js";
import { chart, legend } from "./charts.js";
import { h, replaceChildren } from "./dom.js";

const OUTCOMES = [
  { name: "delivered", cls: "s-good", field: "delivered" },
  { name: "failed", cls: "s-bad", field: "failed" },
];
const LATENESS = [
  { name: "p50", cls: "s-accent", field: "lateness_p50_ms" },
  { name: "p99", cls: "s-warn", field: "lateness_p99_ms" },
];

function figure(title, kind, defs, points, unit) {
  const times = points.map((p) => p.at);
  const series = defs.map((d) => ({ ...d, values: points.map((p) => p[d.field]) }));
  return h(
    "figure",
    { class: "chart-box", testid: `chart-${kind}` },
    h("figcaption", {}, title),
    chart({ title, times, series, kind: kind === "outcomes" ? "bars" : "lines", unit }),
    legend(series),
  );
}

export function seriesPanel(name) {
  const charts = h("div", { class: "charts" }, h("p", { class: "muted" }, "loading…"));
  const node = h(
    "section",
    { class: "panel", testid: "series-panel" },
    h("h2", {}, "Last hour, per minute (UTC)"),
    charts,
    h(
      "p",
      { class: "muted" },
      "Callback attempts that delivered or failed (a retry or dead) in each minute; lateness " +
        "is of first attempts (send time − due time) of jobs registered before they were due. " +
        "The last minute is still filling.",
    ),
  );
  const reload = async () => {
    const data = await api("GET", `/v1/biz-types/${enc(name)}/series`);
    const points = data.points;
    replaceChildren(
      charts,
      figure("Callbacks per minute", "outcomes", OUTCOMES, points, ""),
      figure("Lateness of first attempts", "lateness", LATENESS, points, " ms"),
    );
  };
  return { node, reload };
}
