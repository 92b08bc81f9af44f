// The API client: JSON in and out, the bearer token asked once per tab on a 401, and
// problem documents (RFC 9457) turned into ApiError with the server's title and detail.

import { tokenDialog } from "./dom.js";

const TOKEN_KEY = "timer-console-token";
export const TOKEN_CHANGED = "timer-token-changed";

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.title = problem.title || `HTTP ${status}`;
    this.detail = problem.detail || "";
    this.type = problem.type || "";
    this.errors = problem.errors || [];
  }
}

let pendingToken = null; // one prompt for every call that got a 401 meanwhile

async function askToken() {
  if (!pendingToken) {
    pendingToken = tokenDialog().finally(() => {
      pendingToken = null;
    });
  }
  const token = await pendingToken;
  if (token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    document.dispatchEvent(new Event(TOKEN_CHANGED)); // whoami.js learns the new role
  }
  return token;
}

export function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value === null || value === undefined || value === "") continue;
    for (const one of Array.isArray(value) ? value : [value]) search.append(key, String(one));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

export async function api(method, path, body = undefined) {
  for (let attempt = 0; ; attempt++) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (error) {
      throw new ApiError(0, { title: "The API does not answer", detail: String(error) });
    }
    if (response.status === 401 && attempt < 3) {
      sessionStorage.removeItem(TOKEN_KEY);
      if (await askToken()) continue;
    }
    if (response.status === 204) return null;
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = { title: `HTTP ${response.status}`, detail: text.slice(0, 200) };
    }
    if (!response.ok) throw new ApiError(response.status, data || {});
    return data;
  }
}

export const enc = encodeURIComponent;
