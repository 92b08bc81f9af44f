// Bulk replay / cancel by filter: a dry run gives the count, the operator confirms, then
// the calls follow the continuation cursor to its end, showing progress (stoppable
// between calls).

import { api } from "./api.js";
import { confirmDialog, fmtCount, fmtJson, h, replaceChildren, showError } from "./dom.js";

export const BULK_LIMIT = 500;
const VERB = { replay: "replayed", cancel: "cancelled" };

// Resolves {matched, changed, operationId, stopped} or null when not confirmed / failed.
export async function runBulk(action, filter, progressNode) {
  const path = `/v1/jobs:bulk-${action}`;
  let dry;
  try {
    dry = await api("POST", path, { filter, dry_run: true });
  } catch (error) {
    showError(error);
    return null;
  }
  const ok = await confirmDialog({
    title: `Bulk ${action}`,
    message: `${fmtCount(dry.matched)} jobs would be ${VERB[action]}.`,
    body: h("pre", { class: "filter" }, fmtJson(filter)),
    confirmLabel: `${action === "replay" ? "Replay" : "Cancel"} ${fmtCount(dry.matched)} jobs`,
    canConfirm: () => dry.matched > 0,
  });
  if (!ok) return null;

  let stopped = false;
  const bar = h("progress", { max: Math.max(dry.matched, 1), value: 0, testid: "bulk-bar" });
  const text = h("span", { testid: "bulk-status" }, `${action}: starting…`);
  const stop = h("button", { type: "button", onclick: () => (stopped = true) }, "Stop");
  replaceChildren(progressNode, bar, " ", text, " ", stop);
  progressNode.dataset.state = "running";

  let changed = 0;
  let calls = 0;
  let cursor = null;
  let operationId = null;
  try {
    do {
      const body = { filter, dry_run: false, limit: BULK_LIMIT };
      if (cursor) body.cursor = cursor;
      const answer = await api("POST", path, body);
      calls += 1;
      changed += answer.changed;
      cursor = answer.next_cursor;
      operationId = answer.operation_id;
      bar.value = Math.min(changed, bar.max);
      text.textContent = `${action}: ${fmtCount(changed)} of ${fmtCount(dry.matched)} ${VERB[action]} (${calls} calls)`;
    } while (cursor && !stopped);
  } catch (error) {
    showError(error);
    text.textContent = `${action} failed after ${fmtCount(changed)} ${VERB[action]}`;
    stop.remove();
    return null;
  }
  stop.remove();
  const how = stopped && cursor ? "stopped" : "done";
  text.textContent =
    `${action} ${how}: ${fmtCount(changed)} ${VERB[action]} of ${fmtCount(dry.matched)} counted ` +
    `(operation ${operationId}; jobs that changed state meanwhile are skipped)`;
  progressNode.dataset.state = how;
  return { matched: dry.matched, changed, operationId, stopped: how === "stopped" };
}
