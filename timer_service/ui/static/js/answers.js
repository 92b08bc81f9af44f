// What the endpoint answered to an attempt (docs/console.md, "Job"): a line that says
// it in short, opening onto the kept headers and the body's first KiB. The service
// keeps the last 10 answers of a job, an allow-list of headers, never a secret.

import { h } from "./dom.js";

const PREVIEW_CHARS = 60;

// The member of a JSON answer that says the most in one line (a problem document's
// detail, a common error shape's message), else the body itself.
const TELLING_MEMBERS = ["detail", "title", "error", "message"];

function telling(body) {
  try {
    const parsed = JSON.parse(body);
    if (parsed && typeof parsed === "object") {
      const found = TELLING_MEMBERS.map((k) => parsed[k]).find((v) => typeof v === "string" && v);
      if (found) return found;
    }
  } catch {
    // not JSON, or cut at 1 KiB: the text as it came
  }
  return body;
}

function preview(response) {
  if (response.binary) return "binary body";
  if (response.body === null || response.body === "") return "empty body";
  const flat = telling(response.body).replace(/\s+/g, " ").trim();
  return flat.length > PREVIEW_CHARS ? `${flat.slice(0, PREVIEW_CHARS)}…` : flat;
}

function headersTable(headers) {
  const names = Object.keys(headers || {});
  if (names.length === 0) return h("p", { class: "muted" }, "No header of the kept kinds.");
  return h(
    "table",
    { class: "kv answer-headers", testid: "answer-headers" },
    names.map((name) => h("tr", {}, h("th", {}, name), h("td", {}, headers[name]))),
  );
}

function bodyBlock(response) {
  if (response.binary) {
    return h("p", { class: "muted", testid: "answer-body" }, "Binary body: not kept (see Content-Type, Content-Encoding).");
  }
  if (response.body === null || response.body === "") {
    return h("p", { class: "muted", testid: "answer-body" }, "Empty body.");
  }
  return [
    h("pre", { class: "answer-body", testid: "answer-body" }, response.body),
    response.truncated ? h("p", { class: "muted", testid: "answer-truncated" }, "Longer than this: the first 1 KiB is kept.") : null,
  ];
}

export function answerCell(attempt) {
  const response = attempt.response;
  if (response === undefined) return h("td", { class: "muted" }, "on the job's page");
  if (response === null) {
    const why = attempt.status_code === null ? "no answer" : "not kept (older than the last 10)";
    return h("td", { class: "muted", testid: "answer-none" }, why);
  }
  return h(
    "td",
    { class: "answer" },
    h(
      "details",
      { testid: "answer", "data-attempt": attempt.attempt },
      h("summary", { testid: "answer-summary" }, preview(response)),
      headersTable(response.headers),
      bodyBlock(response),
    ),
  );
}
