// The chat's sidebar: the stored conversations, each opened by a click and renamed, exported (JSON) or
// deleted (with the contexts it ran on) by its buttons.
import { api, call, el } from "./util.js";

const url = (id) => `/studio/api/conversations/${id}`;

// The open conversation takes the title before the PATCH is sent: a save of it that starts meanwhile (an answer
// finishing) would otherwise PUT the old title after the new one.
async function rename(c, hooks, relist) {
  const title = window.prompt("Rename the conversation:", c.title || "");
  if (title === null || !title.trim()) return;
  await hooks.changed(c.id, title.trim());
  await api(url(c.id), { method: "PATCH", json: { title } });
  await relist();
}

// Fetched (it carries the API key, which a plain link cannot), then saved from memory.
async function exportJson(c) {
  const r = await call(`${url(c.id)}/export`);
  if (!r.ok) throw new Error(`export: HTTP ${r.status}`);
  const a = el("a", { href: URL.createObjectURL(await r.blob()), download: `conversation-${c.id}.json` });
  a.click();
  URL.revokeObjectURL(a.href);
}

async function remove(c, refresh) {
  if (!window.confirm(`Delete “${c.title || "(untitled)"}”?`)) return;
  await api(url(c.id), { method: "DELETE" });
  await refresh(c.id, null);
}

// hooks: current() -> the open conversation's id; open(id); changed(id, title or null when deleted).
export async function list(hooks) {
  const side = document.getElementById("conversations");
  if (!side) return;
  const { data } = await api("/studio/api/conversations");
  const refresh = async (id, title) => { await hooks.changed(id, title); await list(hooks); };
  const button = (title, text, fn) => el("button", { title, onclick: (e) => {
    e.stopPropagation();
    fn().catch((err) => { const s = document.getElementById("status"); s.textContent = err.message; s.className = "error"; });
  } }, text);
  side.replaceChildren(...data.map((c) => el("div", {
    class: `conv ${c.id === hooks.current() ? "active" : ""}`, "data-conversation": c.id, title: c.title,
    onclick: () => hooks.open(c.id) },
    el("span", { class: "title" }, c.title || "(untitled)"),
    button("rename", "✎", () => rename(c, hooks, () => list(hooks))),
    button("export as JSON", "⤓", () => exportJson(c)),
    button("delete", "×", () => remove(c, refresh)))));
}
