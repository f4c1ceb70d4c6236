// Models: the store (list, show, copy, delete) and pulls with a live progress bar (Ollama's /api/pull events).
import { api, bytes, el, ndjson } from "./util.js";

const view = () => document.getElementById("view-models");

async function pull(name) {
  const bar = document.getElementById("pull-bar"), label = document.getElementById("pull-status");
  label.className = "";
  try {
    for await (const ev of ndjson("/api/pull", { model: name, stream: true })) {
      if (ev.total) bar.style.width = `${(100 * (ev.completed || 0) / ev.total).toFixed(1)}%`;
      label.textContent = ev.total ? `${ev.status} ${bytes(ev.completed || 0)} / ${bytes(ev.total)}` : ev.status;
      if (ev.status === "success") bar.style.width = "100%";
    }
    await list();
  } catch (e) {
    label.textContent = e.message;
    label.className = "error";
  }
}

async function showModel(name) {
  const r = await api("/api/show", { json: { model: name } });
  const info = Object.entries(r.model_info || {}).filter(([, v]) => typeof v !== "object").slice(0, 40)
    .map(([k, v]) => `${k}: ${v}`).join("\n");
  const dialog = el("dialog", { id: "model-dialog" },
    el("h3", {}, name),
    el("h4", {}, "Details"), el("pre", {}, JSON.stringify(r.details || {}, null, 2)),
    el("h4", {}, "Metadata"), el("pre", {}, info),
    el("h4", {}, "Template"), el("pre", {}, r.template || "(none)"),
    el("h4", {}, "License"), el("pre", {}, r.license || "(none)"),
    el("button", { onclick: () => dialog.close() }, "close"));
  document.body.append(dialog);
  dialog.addEventListener("close", () => dialog.remove());
  dialog.showModal();
}

async function guarded(fn) {
  try { await fn(); } catch (e) { document.getElementById("models-error").textContent = e.message; }
  await list();
}

async function list() {
  const { models } = await api("/api/tags");
  document.getElementById("models-table").replaceChildren(
    el("tr", {}, ["name", "size", "quant", "architecture", "parameters", ""].map((h) => el("th", {}, h))),
    ...models.map((m) => el("tr", { "data-model": m.name },
      el("td", {}, m.name), el("td", {}, bytes(m.size)), el("td", {}, m.details?.quantization_level || ""),
      el("td", {}, m.details?.family || ""), el("td", {}, m.details?.parameter_size || ""),
      el("td", {}, el("div", { class: "row" },
        el("button", { onclick: () => showModel(m.name) }, "show"),
        el("button", { onclick: () => { const to = window.prompt(`Copy ${m.name} to:`); if (to) guarded(() =>
          api("/api/copy", { json: { source: m.name, destination: to } })); } }, "copy"),
        el("button", { onclick: () => { if (window.confirm(`Delete ${m.name}?`)) guarded(() =>
          api("/api/delete", { method: "DELETE", json: { model: m.name } })); } }, "delete"))))));
}

export async function show() {
  const name = el("input", { id: "pull-name", class: "grow", placeholder: "qwen2.5:0.5b, hf.co/ORG/REPO:Q4_K_M, pypi:PKG==V" });
  view().replaceChildren(
    el("div", { class: "card" }, el("h3", {}, "Pull"),
       el("div", { class: "row" }, name, el("button", { id: "pull", class: "primary",
          onclick: () => name.value.trim() && pull(name.value.trim()) }, "pull")),
       el("div", { class: "row" }, el("div", { class: "bar grow" }, el("div", { id: "pull-bar" })),
          el("span", { id: "pull-status", class: "muted" }))),
    el("div", { class: "card" }, el("h3", {}, "Store"), el("div", { id: "models-error", class: "error" }),
       el("table", { id: "models-table" })));
  await list();
}
