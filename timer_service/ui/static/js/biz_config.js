// A biz type's config: the editable form, and the confirmed writes that save it. A new
// biz type is a PUT. A stored one changes by a PATCH (a JSON Merge Patch) that names only
// the fields the form changed, so what the form does not show stays as stored: the
// signing secret (which the API never returns) and the registration quota. Pause and
// resume are PATCH {"paused": ...}: a signed biz type pauses without its secret.

import { api, enc } from "./api.js";
import { confirmDialog, h } from "./dom.js";

const RETRY_DEFAULTS = { max_attempts: 10, initial_backoff_ms: 1000, max_backoff_ms: 600000, multiplier: 2.0 };
const DEFAULTS = {
  callback_url: "",
  rate_limit_per_s: null,
  burst: 1,
  max_concurrency: 16,
  timeout_ms: 10000,
  retry: RETRY_DEFAULTS,
  paused: false,
};

// The fields of a stored config that the form edits, as a PUT body has them.
function bodyOf(config) {
  return {
    callback_url: config.callback_url,
    rate_limit_per_s: config.rate_limit_per_s,
    burst: config.burst,
    max_concurrency: config.max_concurrency,
    timeout_ms: config.timeout_ms,
    retry: { ...config.retry },
    paused: config.paused,
  };
}

// The merge patch (RFC 7396) that turns `before` into `after`: the fields that differ,
// nested objects (`retry`) member by member; a field set to null resets it.
export function patchOf(before, after) {
  const patch = {};
  for (const [key, value] of Object.entries(after)) {
    if (value && typeof value === "object") {
      const inner = patchOf(before[key] || {}, value);
      if (Object.keys(inner).length) patch[key] = inner;
    } else if (before[key] !== value) {
      patch[key] = value;
    }
  }
  return patch;
}

function flatten(body, prefix = "") {
  const out = {};
  for (const [key, value] of Object.entries(body)) {
    if (value && typeof value === "object") Object.assign(out, flatten(value, `${prefix}${key}.`));
    else out[`${prefix}${key}`] = value;
  }
  return out;
}

function changes(before, patch) {
  const a = flatten(before);
  return Object.entries(flatten(patch)).map(([k, v]) =>
    h("li", {}, `${k}: ${a[k] ?? "null"} → ${v ?? "null"}`),
  );
}

// Asks, then PUTs `body` as a new biz type `name`; the stored config, or null if not
// confirmed.
export async function createBizType({ name, body }) {
  const secret = h("input", { type: "password", autocomplete: "off", testid: "secret-input" });
  const ok = await confirmDialog({
    title: `Create ${name}?`,
    message: `PUT /v1/biz-types/${name} creates the biz type.`,
    body: h("label", {}, "Signing secret (optional) ", secret),
    confirmLabel: "Create",
  });
  if (!ok) return null;
  const sent = { ...body };
  if (secret.value) sent.signing_secret = secret.value;
  return api("PUT", `/v1/biz-types/${enc(name)}`, sent);
}

// Asks, then PATCHes the fields of `body` that differ from `stored`; the saved config, or
// null if not confirmed. The secret stays unless a new one is entered or removal ticked.
export async function saveBizType({ name, body, stored }) {
  const secret = h("input", { type: "password", autocomplete: "off", testid: "secret-input" });
  const remove = h("input", { type: "checkbox", testid: "remove-secret" });
  const patch = patchOf(bodyOf(stored), body);
  const diff = changes(bodyOf(stored), patch);
  const extra = h(
    "div",
    {},
    diff.length ? h("ul", { class: "diff", testid: "config-diff" }, diff) : h("p", {}, "No field changes."),
    stored.has_signing_secret
      ? h(
          "div",
          { class: "secret-box" },
          h("p", {}, "This biz type signs its callbacks; its secret stays unless you enter a new one."),
          h("label", {}, "New signing secret (optional) ", secret),
          h("label", {}, remove, " remove the signing secret"),
        )
      : h("label", {}, "Signing secret (optional) ", secret),
  );
  const ok = await confirmDialog({
    title: `Save the config of ${name}?`,
    message: `PATCH /v1/biz-types/${name} changes the fields listed; the rest stays as stored.`,
    body: extra,
    confirmLabel: "Save",
    canConfirm: () => !(secret.value !== "" && remove.checked),
  });
  if (!ok) return null;
  if (secret.value) patch.signing_secret = secret.value;
  else if (remove.checked) patch.signing_secret = null;
  return api("PATCH", `/v1/biz-types/${enc(name)}`, patch);
}

// Asks, then pauses or resumes `name` (PATCH {"paused": ...}, nothing else changes); the
// saved config, or null if not confirmed.
export async function setPaused({ name, paused }) {
  const ok = await confirmDialog({
    title: paused ? `Pause ${name}?` : `Resume ${name}?`,
    message:
      `PATCH /v1/biz-types/${name} {"paused": ${paused}}: ` +
      (paused ? "no callback goes out until it is resumed." : "its waiting jobs go out, within its rate limit."),
    confirmLabel: paused ? "Pause" : "Resume",
  });
  if (!ok) return null;
  return api("PATCH", `/v1/biz-types/${enc(name)}`, { paused });
}

function numberOrNull(value) {
  return value === "" ? null : Number(value);
}

function field(label, input, hint = "") {
  return h("label", { class: "field" }, h("span", {}, label), input, hint ? h("small", {}, hint) : null);
}

// The form; calls onSave(name, body) on submit. `config` null: a new biz type.
export function configForm(config, onSave) {
  const c = config || DEFAULTS;
  const input = (name, value, attrs = {}) =>
    h("input", { name, value: value ?? "", testid: `cfg-${name}`, ...attrs });
  const num = (name, value, attrs = {}) => input(name, value, { type: "number", ...attrs });
  const name = config
    ? null
    : input("biz_type", "", { required: true, pattern: "[a-z0-9][a-z0-9_.\\-]{0,63}" });
  const url = input("callback_url", c.callback_url, { type: "url", required: true, size: 48 });
  const rate = num("rate_limit_per_s", c.rate_limit_per_s, { min: 0, step: "any", placeholder: "unlimited" });
  const burst = num("burst", c.burst, { min: 1, required: true });
  const concurrency = num("max_concurrency", c.max_concurrency, { min: 1, required: true });
  const timeout = num("timeout_ms", c.timeout_ms, { min: 1, required: true });
  const attempts = num("max_attempts", c.retry.max_attempts, { min: 1, required: true });
  const initial = num("initial_backoff_ms", c.retry.initial_backoff_ms, { min: 0, required: true });
  const maxBackoff = num("max_backoff_ms", c.retry.max_backoff_ms, { min: 0, required: true });
  const multiplier = num("multiplier", c.retry.multiplier, { min: 1, step: "any", required: true });
  const paused = input("paused", null, { type: "checkbox", checked: c.paused });
  const form = h(
    "form",
    {
      class: "config",
      testid: "config-form",
      onsubmit: (event) => {
        event.preventDefault();
        onSave(name ? name.value : config.biz_type, {
          callback_url: url.value,
          rate_limit_per_s: numberOrNull(rate.value),
          burst: Number(burst.value),
          max_concurrency: Number(concurrency.value),
          timeout_ms: Number(timeout.value),
          retry: {
            max_attempts: Number(attempts.value),
            initial_backoff_ms: Number(initial.value),
            max_backoff_ms: Number(maxBackoff.value),
            multiplier: Number(multiplier.value),
          },
          paused: paused.checked,
        });
      },
    },
    name ? field("name", name, "a-z, 0-9, _ . - (64 at most)") : null,
    field("callback URL", url),
    field("rate limit /s", rate, "empty: unlimited"),
    field("burst", burst),
    field("max concurrency", concurrency),
    field("timeout (ms)", timeout),
    field("max attempts", attempts),
    field("initial backoff (ms)", initial),
    field("max backoff (ms)", maxBackoff),
    field("backoff multiplier", multiplier),
    h("label", { class: "field" }, h("span", {}, "paused"), paused),
    h("div", { class: "actions" }, h("button", { class: "primary", testid: "save-config", "data-needs": config ? "operator" : "admin" }, config ? "Save…" : "Create…")),
  );
  return form;
}
