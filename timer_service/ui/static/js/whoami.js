// Who the console acts as (GET /v1/tokens/self): the role goes on <body data-role>, and
// app.css hides every element whose `data-needs` role is above it. The API refuses such
// actions anyway (403); hiding them spares the operator a button that cannot work.

import { api, TOKEN_CHANGED } from "./api.js";

const ROLES = ["viewer", "producer", "operator", "admin"];

export async function whoami() {
  const label = document.getElementById("whoami");
  try {
    const me = await api("GET", "/v1/tokens/self");
    document.body.dataset.role = ROLES.includes(me.role) ? me.role : "viewer";
    const scope = me.biz_types.length ? me.biz_types.join(", ") : "all biz types";
    label.textContent = me.auth ? `${me.name} · ${me.role} · ${scope}` : "";
  } catch {
    document.body.dataset.role = "viewer"; // unknown: show the least, the API decides
    label.textContent = "";
  }
}

document.addEventListener(TOKEN_CHANGED, () => {
  whoami();
});
