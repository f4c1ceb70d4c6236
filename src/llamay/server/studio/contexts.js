// Contexts: every named context as a tree (fork points, tokens, pages held, pages shared with the parent),
// create / fork / continue / delete, snapshots down and up, the prefix cache's contents and the KV pages
// against the budget, refreshed while the view is open.
import { api, call, el, readable } from "./util.js";

let timer = null;
let notice = "";
const view = () => document.getElementById("view-contexts");

function say(text, bad = false) {
  notice = { text, bad };
  const n = document.getElementById("ctx-notice");
  if (n) { n.textContent = text; n.className = bad ? "error" : "good"; }
}

async function act(fn) {
  try { await fn(); } catch (e) { say(e.message, true); }
  await refresh();
}

function nodeView(c, kids) {
  const row = el("div", { class: "row" },
    el("strong", { "data-context": c.id }, c.id),
    el("span", { class: "muted" }, c.model),
    el("span", {}, `${c.tokens} tokens · ${c.pages} pages`),
    c.parent ? el("span", { class: "shared", "data-shared": c.shared_with_parent },
                  `${c.shared_with_parent} pages shared with ${c.parent} (branched at token ${c.forked_at})`) : null,
    c.title ? el("span", { class: "muted" }, `“${c.title}”`) : null,
    el("button", { onclick: () => act(() => api(`/v1/contexts/${c.id}/fork?n=1`, { method: "POST" })) }, "fork"),
    el("button", { onclick: () => act(async () => {
      const text = window.prompt("Text to append and continue from:", "");
      if (text === null) return;
      const r = await api(`/v1/contexts/${c.id}/generate`, { json: { prompt: text, max_tokens: 32 } });
      say(`generated: ${r.choices[0].text}`);
    }) }, "continue"),
    el("a", { href: `/v1/contexts/${c.id}/snapshot`, download: `${c.id}.llamayctx`, onclick: (e) => download(e, c.id) },
       "snapshot"),
    el("button", { onclick: () => act(() => api(`/v1/contexts/${c.id}`, { method: "DELETE" })) }, "delete"));
  return el("div", { class: "node" }, row, kids.length ? el("div", { class: "kids" }, kids) : null);
}

function tree(data) {
  const ids = new Set(data.map((c) => c.id));
  const by = (parent) => data.filter((c) => (c.parent && ids.has(c.parent) ? c.parent : null) === parent);
  const grow = (c) => nodeView(c, by(c.id).map(grow));
  const roots = by(null).map(grow);
  return roots.length ? roots : [el("p", { class: "muted" }, "No contexts yet.")];
}

function kvView(kv) {
  return Object.entries(kv).map(([model, k]) => el("div", { class: "row" },
    el("span", {}, model),
    el("div", { class: "bar", title: `${k.pages_used} of ${k.pages_total} pages` },
       el("div", { style: `width: ${(100 * k.pages_used / k.pages_total).toFixed(1)}%` })),
    el("span", { "data-kv": model }, `${k.pages_used} / ${k.pages_total} pages in use (${k.pages_contexts} by contexts, ` +
       `${k.pages_cache} in the prefix cache, ${k.page_size} tokens each)`)));
}

function cacheView(models) {
  const rows = [];
  for (const [model, seqs] of Object.entries(models)) {
    for (const s of seqs) {
      rows.push(el("tr", {}, el("td", {}, s.rank + 1), el("td", {}, model), el("td", {}, s.tokens),
                   el("td", {}, s.pages), el("td", {}, s.hits), el("td", { class: "muted" }, readable(s.text))));
    }
  }
  return el("table", {}, el("tr", {}, ["LRU", "model", "tokens", "pages", "hits", "prefix"].map((h) => el("th", {}, h))),
            rows.length ? rows : el("tr", {}, el("td", { colspan: 6, class: "muted" }, "empty")));
}

// With an API key the link cannot carry it: fetched, then saved from memory.
async function download(event, id) {
  if (!localStorage.getItem("llamay-api-key")) return;
  event.preventDefault();
  const r = await call(`/v1/contexts/${id}/snapshot`);
  if (!r.ok) { say(`snapshot: HTTP ${r.status}`, true); return; }
  const a = el("a", { href: URL.createObjectURL(await r.blob()), download: `${id}.llamayctx` });
  a.click();
  URL.revokeObjectURL(a.href);
}

async function restore(file, model) {
  const q = model ? `?model=${encodeURIComponent(model)}` : "";
  const r = await call(`/v1/contexts${q}`, { method: "POST", headers: { "content-type": "application/octet-stream" },
                                             body: await file.arrayBuffer() });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error?.message || `HTTP ${r.status}`);
  say(`restored as ${body.id}: ${body.tokens} tokens, nothing recomputed`);
}

async function refresh() {
  const root = view();
  if (!root.classList.contains("active")) return;
  const [{ data, kv }, cache] = await Promise.all([api("/studio/api/contexts"), api("/studio/api/cache")]);
  document.getElementById("ctx-tree").replaceChildren(...tree(data));
  document.getElementById("ctx-kv").replaceChildren(...kvView(kv));
  document.getElementById("ctx-cache").replaceChildren(cacheView(cache.models));
}

export async function show() {
  const models = (await api("/api/tags")).models;
  const pick = (id) => el("select", { id }, models.map((m) => el("option", { value: m.name }, m.name)));
  const text = el("input", { id: "ctx-prompt", class: "grow", placeholder: "a prompt to compute once and keep" });
  const upload = el("input", { id: "ctx-upload", type: "file", accept: ".llamayctx" });
  view().replaceChildren(
    el("div", { class: "card" }, el("h3", {}, "KV pages"), el("div", { id: "ctx-kv" })),
    el("div", { class: "card" }, el("h3", {}, "Contexts"),
       el("div", { class: "row" }, pick("ctx-model"), text,
          el("button", { class: "primary", id: "ctx-create", onclick: () => act(async () => {
            const r = await api("/v1/contexts", { json: { model: document.getElementById("ctx-model").value,
                                                          prompt: text.value } });
            say(`made ${r.id}: ${r.tokens} tokens (${r.cached_tokens ?? 0} from the cache)`);
          }) }, "create")),
       el("div", { class: "row" }, "Restore a snapshot:", upload, pick("ctx-restore-model"),
          el("button", { id: "ctx-restore", onclick: () => act(() => restore(upload.files[0],
            document.getElementById("ctx-restore-model").value)) }, "restore")),
       el("div", { id: "ctx-notice", class: notice.bad ? "error" : "good" }, notice.text || ""),
       el("div", { id: "ctx-tree", class: "tree" })),
    el("div", { class: "card" }, el("h3", {}, "Prefix cache"), el("div", { id: "ctx-cache" })));
  await refresh();
  clearInterval(timer);
  timer = setInterval(() => refresh().catch(() => {}), 2000);
}
