// A biz type's config: the editable form, and the confirmed PUT that saves it (also
// used by pause / resume). A PUT replaces the whole config and the API never returns
// the signing secret, so a save of a biz type that has one asks for it again, or for
// an explicit "remove it".

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

// The PUT body that keeps a stored config as it is (less the secret, which is unknowable).
export function bodyOf(config) {
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

function flatten(body, prefix = "") {
  const out = {};
  for (const [key, value] of Object.entries(body)) {
    if (value && typeof value === "object") Object.assign(out, flatten(value, `${prefix}${key}.`));
    else out[`${prefix}${key}`] = value;
  }
  return out;
}

function changes(before, after) {
  if (!before) return [];
  const a = flatten(before);
  const b = flatten(after);
  return Object.keys(b)
    .filter((k) => a[k] !== b[k])
    .map((k) => h("li", {}, `${k}: ${a[k] ?? "null"} → ${b[k] ?? "null"}`));
}

// Asks, then PUTs `body` as `name`'s config; the saved config, or null if not confirmed.
export async function putBizType({ name, body, stored, title, confirmLabel }) {
  const hasSecret = Boolean(stored && stored.has_signing_secret);
  const secret = h("input", { type: "password", autocomplete: "off", testid: "secret-input" });
  const remove = h("input", { type: "checkbox", testid: "remove-secret" });
  const diff = changes(stored && bodyOf(stored), body);
  const extra = h(
    "div",
    {},
    diff.length ? h("ul", { class: "diff", testid: "config-diff" }, diff) : null,
    hasSecret
      ? h(
          "div",
          { class: "secret-box" },
          h(
            "p",
            {},
            "This biz type signs its callbacks. A save replaces the whole config and the API " +
              "never shows the secret: enter it to keep it (or a new one), or remove it.",
          ),
          h("label", {}, "Signing secret ", secret),
          h("label", {}, remove, " remove the signing secret"),
        )
      : h("label", {}, "Signing secret (optional) ", secret),
  );
  const ok = await confirmDialog({
    title,
    message: stored
      ? `PUT /v1/biz-types/${name} replaces its config.`
      : `PUT /v1/biz-types/${name} creates the biz type.`,
    body: extra,
    confirmLabel,
    canConfirm: () => !hasSecret || secret.value !== "" || remove.checked,
  });
  if (!ok) return null;
  const sent = { ...body };
  if (secret.value) sent.signing_secret = secret.value;
  return api("PUT", `/v1/biz-types/${enc(name)}`, sent);
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
    h("div", { class: "actions" }, h("button", { class: "primary", testid: "save-config" }, config ? "Save…" : "Create…")),
  );
  return form;
}
