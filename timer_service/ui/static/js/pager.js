// A server-paged list: one page in the DOM at a time, cursors from the API, a stack of
// them for "previous". Never loads more than one page, whatever the total.

import { h, replaceChildren, showError } from "./dom.js";

// load(cursor) -> {items, next_cursor}; render(items) -> a node (a table).
export function pager({ load, render, testid, empty = "Nothing here.", idle = "Loading…" }) {
  const body = h("div", { class: "pager-body" }, h("p", { class: "muted" }, idle));
  const status = h("span", { class: "muted", testid: `${testid}-page` });
  const prev = h("button", { onclick: () => go(cursors.length - 2), testid: `${testid}-prev` }, "‹ Previous");
  const next = h("button", { onclick: () => go(cursors.length), testid: `${testid}-next` }, "Next ›");
  prev.disabled = next.disabled = true;
  const node = h("div", { class: "pager", testid }, body, h("div", { class: "pager-nav" }, prev, status, next));
  // cursors[i] is the cursor that loads page i (page 0: null); nextCursor follows the last.
  let cursors = [null];
  let nextCursor = null;
  let loading = 0;

  async function go(pageIndex) {
    if (pageIndex < 0) return;
    const cursor = pageIndex < cursors.length ? cursors[pageIndex] : nextCursor;
    if (pageIndex >= cursors.length && !nextCursor) return;
    const ticket = ++loading;
    prev.disabled = next.disabled = true;
    node.classList.add("loading");
    try {
      const page = await load(cursor);
      if (ticket !== loading) return; // a newer load won
      cursors = cursors.slice(0, pageIndex);
      cursors.push(cursor);
      nextCursor = page.next_cursor;
      replaceChildren(
        body,
        page.items.length ? render(page.items) : h("p", { class: "muted", testid: `${testid}-empty` }, empty),
      );
      status.textContent = `page ${cursors.length}, ${page.items.length} rows`;
      prev.disabled = cursors.length <= 1;
      next.disabled = !nextCursor;
    } catch (error) {
      if (ticket === loading) {
        showError(error);
        prev.disabled = cursors.length <= 1;
        next.disabled = !nextCursor;
      }
    } finally {
      if (ticket === loading) node.classList.remove("loading");
    }
  }

  return {
    node,
    reload: () => go(0),
    refresh: () => go(cursors.length - 1),
  };
}
