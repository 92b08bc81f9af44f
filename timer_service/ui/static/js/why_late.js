// "Why late" of a job (docs/api.md, "Why late"): one line from the job resource's
// `lateness`: what an open job waits for, or where a final job's lateness arose.

import { h } from "./dom.js";

const REASONS = {
  retry: "retry backoff",
  paused: "paused",
  no_daemon: "no daemon",
  daemon_behind: "daemon behind",
  claim: "claim",
  no_broker: "no broker",
  rate_limit: "rate limit",
  concurrency: "in-flight cap",
  broker: "broker",
  endpoint: "endpoint",
  reconcile: "reconciler",
};

const PARTS = [
  ["publish_ms", "publish"],
  ["hold_ms", "hold"],
  ["send_ms", "first send"],
  ["retries_ms", "retries"],
  ["endpoint_ms", "endpoint"],
];

function fmtMs(ms) {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60_000)} min`;
}

function whyLateText(lateness) {
  const late = `${fmtMs(lateness.late_ms)} late`;
  if (lateness.kind === "waiting") {
    const reason = REASONS[lateness.waiting_for] ?? lateness.waiting_for;
    return `${late} — ${reason}: ${lateness.detail}`;
  }
  const parts = PARTS.filter(([key]) => lateness[key] !== null && lateness[key] !== undefined).map(
    ([key, name]) => `${name} ${fmtMs(lateness[key])}`,
  );
  return `${late} — ${parts.join(" · ")}: ${lateness.detail}`;
}

// The line for a late job; null when it is on time (lateness null or absent).
export function whyLateLine(job) {
  if (!job.lateness) return null;
  const kind = job.lateness.kind === "waiting" ? job.lateness.waiting_for : "final";
  return h("p", { class: "why-late", testid: "job-why-late", "data-reason": kind }, whyLateText(job.lateness));
}
