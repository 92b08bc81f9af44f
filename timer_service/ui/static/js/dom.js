// Building DOM nodes, formatting values, and the console's two dialogs and error banner.

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "testid") node.dataset.testid = value;
    else if (key in node && typeof value !== "string") node[key] = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
}

export function replaceChildren(node, ...children) {
  node.replaceChildren();
  append(node, children);
}

// Times are shown in UTC, as the API speaks them (epoch ms).
export function fmtTime(ms) {
  if (ms === null || ms === undefined) return "—";
  return new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC");
}

export function fmtRelative(ms, nowMs = Date.now()) {
  if (ms === null || ms === undefined) return "";
  const deltaS = Math.round((ms - nowMs) / 1000);
  const abs = Math.abs(deltaS);
  const text =
    abs < 60 ? `${abs} s` : abs < 3600 ? `${Math.round(abs / 60)} min` : `${Math.round(abs / 3600)} h`;
  return deltaS >= 0 ? `in ${text}` : `${text} ago`;
}

export function fmtCount(n) {
  return n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US");
}

export function fmtJson(value) {
  return JSON.stringify(value, null, 2);
}

// "2026-01-01T10:00" from a datetime-local input, read as UTC, to epoch ms.
export function utcInputToMs(value) {
  if (!value) return null;
  const ms = Date.parse(`${value}Z`);
  return Number.isNaN(ms) ? null : ms;
}

export function labelChips(labels) {
  return Object.entries(labels || {}).map(([k, v]) => h("span", { class: "chip" }, `${k}:${v}`));
}

// -- error banner -------------------------------------------------------------------

export function showError(error) {
  const banner = document.getElementById("error");
  const title = error.title || error.name || "Error";
  const detail = error.detail || error.message || "";
  const fieldErrors = (error.errors || []).map((e) =>
    h("li", {}, `${(e.loc || []).join(".")}: ${e.msg}`),
  );
  replaceChildren(
    banner,
    h("strong", {}, error.status ? `${error.status} ${title}` : title),
    detail ? h("span", {}, ` — ${detail}`) : null,
    fieldErrors.length ? h("ul", {}, fieldErrors) : null,
    h("button", { class: "link", onclick: clearError }, "dismiss"),
  );
  banner.hidden = false;
}

export function clearError() {
  const banner = document.getElementById("error");
  banner.hidden = true;
  banner.replaceChildren();
}

// -- dialogs --------------------------------------------------------------------------

// A modal question; resolves true on confirm. `body` may hold extra nodes (a form);
// `canConfirm()`, when given, enables the confirm button on each input in the dialog.
export function confirmDialog({ title, message, body = null, confirmLabel = "Confirm", canConfirm }) {
  const dialog = document.getElementById("confirm-dialog");
  const confirm = h("button", { class: "primary", value: "confirm", testid: "confirm" }, confirmLabel);
  const refresh = () => {
    confirm.disabled = canConfirm ? !canConfirm() : false;
  };
  replaceChildren(
    dialog,
    h(
      "form",
      { method: "dialog", oninput: refresh, onchange: refresh },
      h("h2", {}, title),
      h("p", { testid: "confirm-message" }, message),
      body,
      h("menu", {}, h("button", { value: "cancel", formnovalidate: true }, "Cancel"), confirm),
    ),
  );
  refresh();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), {
      once: true,
    });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

// Asks for the bearer token; resolves the token, or null when cancelled.
export function tokenDialog() {
  const dialog = document.getElementById("token-dialog");
  const input = h("input", {
    type: "password",
    name: "token",
    autocomplete: "off",
    required: true,
    testid: "token-input",
  });
  replaceChildren(
    dialog,
    h(
      "form",
      { method: "dialog" },
      h("h2", {}, "API token"),
      h(
        "p",
        {},
        "The API asks for a bearer token (TIMER_API_TOKEN, a named token, or an access token tmr_…). " +
          "It is kept in this tab only (sessionStorage).",
      ),
      h("label", {}, "Token ", input),
      h(
        "menu",
        {},
        h("button", { value: "cancel", formnovalidate: true }, "Cancel"),
        h("button", { class: "primary", value: "ok", testid: "token-ok" }, "Use token"),
      ),
    ),
  );
  return new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => resolve(dialog.returnValue === "ok" && input.value ? input.value : null),
      { once: true },
    );
    dialog.returnValue = "";
    dialog.showModal();
  });
}
