// Chat: a conversation is a tree of messages kept server-side (/studio/api/conversations); each answer
// is generated on a named context (/studio/api/contexts: the Studio's, least recently used freed first).
// Continuing the newest answer of a context appends to it; anything else (an edit, a regenerate, a reply to
// an older answer) forks the context at that message (?messages=k), so the branch shares the pages of
// everything before it. A context that is gone (freed, expired, a restart) is made again from the
// messages: the prefix cache still has their pages. A reply stopped by the user is kept as far as it got
// and marked "stopped", as llama-server's web UI keeps it; it is part of what the next message sends.
import { api, el, markdown, openSse, uid, bytes } from "./util.js";
import * as sidebar from "./sidebar.js";

let conv = null;
let controller = null;
let models = [];
const view = () => document.getElementById("view-chat");

function blank(model) {
  return { id: uid(), title: "", model, system: "", settings: { temperature: 0.7, top_p: 0.95, max_tokens: 512,
           top_k: 40, min_p: 0.05, repeat_penalty: 1, seed: "", schema: "" }, nodes: {}, leaf: null, heads: {} };
}

function path(leaf) {
  const out = [];
  for (let id = leaf; id; id = conv.nodes[id].parent) out.unshift(conv.nodes[id]);
  return out;
}

function children(id) {
  return Object.values(conv.nodes).filter((n) => n.parent === id).sort((a, b) => a.t - b.t);
}

function toMessage(n) {
  const m = { role: n.role, content: n.content };
  if (n.tool_calls && n.tool_calls.length) m.tool_calls = n.tool_calls;
  return m;
}

function messagesThrough(node) {
  const head = conv.system ? [{ role: "system", content: conv.system }] : [];
  return head.concat(path(node.id).map(toMessage));
}

const count = (node) => messagesThrough(node).length;

function add(node) {
  const n = { id: uid(), t: Date.now() + Object.keys(conv.nodes).length / 1000, ...node };
  conv.nodes[n.id] = n;
  return n;
}

function deepest(id) {
  let kids;
  while ((kids = children(id)).length) id = kids[kids.length - 1].id;
  return id;
}

async function save() {
  if (!Object.keys(conv.nodes).length) return; // nothing said yet (or deleted while it answered)
  if (!conv.title) {
    const first = Object.values(conv.nodes).find((n) => n.role === "user");
    conv.title = first ? first.content.slice(0, 60) : "";
  }
  await api(`/studio/api/conversations/${conv.id}`, { method: "PUT", json: conv });
  await listConversations();
}

function sampling() {
  const s = conv.settings, out = { temperature: Number(s.temperature), top_p: Number(s.top_p),
                                   max_tokens: Number(s.max_tokens) };
  for (const key of ["seed", "top_k", "min_p", "repeat_penalty"]) { // unset: the server's default
    if (s[key] !== "" && s[key] !== undefined) out[key] = Number(s[key]);
  }
  if (s.tools && s.tools.trim()) out.tools = JSON.parse(s.tools);
  if (s.schema && s.schema.trim()) {
    out.response_format = { type: "json_schema", json_schema: { name: "studio", schema: JSON.parse(s.schema) } };
  }
  return out;
}

// The context to answer userNode on, and what to send it.
async function contextFor(userNode, regenerate) {
  const parent = userNode.parent ? conv.nodes[userNode.parent] : null;
  const newTurn = regenerate ? {} : { messages: [toMessage(userNode)] };
  if (regenerate) {
    const old = children(userNode.id).find((n) => n.ctx);
    if (old) {
      const made = await fork(old.ctx, count(userNode));
      if (made) return { ctx: made, body: {}, fresh: true };
    }
  } else if (parent && parent.ctx) {
    if (conv.heads[parent.ctx] === parent.id) return { ctx: parent.ctx, body: newTurn, fresh: false };
    const made = await fork(parent.ctx, count(parent));
    if (made) return { ctx: made, body: newTurn, fresh: true };
  }
  const r = await api("/studio/api/contexts", { json: { model: conv.model, messages: messagesThrough(userNode) } });
  // the prompt was computed here, not by the chat call: its figures count what this found cached
  return { ctx: r.id, body: {}, fresh: true, cached: r.cached_tokens };
}

async function fork(ctx, k) {
  try {
    return (await api(`/studio/api/contexts/${ctx}/fork?n=1&messages=${k}`, { method: "POST" })).ids[0];
  } catch (e) {
    // gone (a restart, --context-ttl), or it no longer holds that message: made again from the messages
    if (/no context|messages must be/.test(e.message)) return null;
    throw e;
  }
}

// A turn's stream on made.ctx, opened (a refusal throws here).
function startTurn(made) {
  const request = { ...made.body, ...sampling(), stream: true, stream_options: { include_usage: true } };
  return openSse(`/studio/api/contexts/${made.ctx}/chat`, request, controller.signal);
}

function forget(ctx) {
  delete conv.heads[ctx];
  for (const n of Object.values(conv.nodes)) if (n.ctx === ctx) n.ctx = null;
}

async function answer(userNode, regenerate = false) {
  const asst = add({ parent: userNode.id, role: "assistant", content: "", reasoning: "", tool_calls: [] });
  conv.leaf = asst.id;
  controller = new AbortController();
  render();
  const t0 = performance.now();
  let tFirst = null, made = null;
  try {
    made = await contextFor(userNode, regenerate);
    let stream;
    try { stream = await startTurn(made); } catch (e) {
      if (!/no context/.test(e.message)) throw e;
      forget(made.ctx); // freed since: made again from the messages
      made = await contextFor(userNode, regenerate);
      stream = await startTurn(made);
    }
    const ctx = made.ctx;
    asst.ctx = ctx;
    for await (const chunk of stream) {
      for (const choice of chunk.choices || []) {
        const d = choice.delta || {};
        if ((d.content || d.reasoning_content) && tFirst === null) tFirst = performance.now();
        if (d.content) asst.content += d.content;
        if (d.reasoning_content) asst.reasoning += d.reasoning_content;
        for (const call of d.tool_calls || []) {
          const slot = asst.tool_calls[call.index] ||= { id: call.id, type: "function", function: { name: "", arguments: "" } };
          if (call.function?.name) slot.function.name += call.function.name;
          if (call.function?.arguments) slot.function.arguments += call.function.arguments;
        }
      }
      if (chunk.usage) {
        const u = chunk.usage, secs = (performance.now() - (tFirst ?? t0)) / 1000;
        const cached = made.cached ?? u.prompt_tokens_details?.cached_tokens ?? 0;
        asst.figures = { prompt: u.prompt_tokens, cached,
                         generated: u.completion_tokens, tps: secs > 0 ? u.completion_tokens / secs : 0,
                         ttft: ((tFirst ?? performance.now()) - t0) / 1000 };
      }
      renderMessages();
    }
    conv.heads[ctx] = asst.id;
  } catch (e) {
    if (e.name === "AbortError") asst.stopped = true;
    else asst.error = e.message;
    // an unfinished answer is not kept in its context: what follows it is made again from the messages
    if (made && made.fresh) api(`/v1/contexts/${made.ctx}`, { method: "DELETE" }).catch(() => {});
    else if (made) conv.heads[made.ctx] = userNode.parent; // the context still ends at the parent's answer
    asst.ctx = null;
  } finally {
    controller = null;
    render();
    await save();
  }
}

async function send() {
  const box = document.getElementById("prompt");
  const text = box.value.trim();
  if (!text || controller) return;
  box.value = "";
  const user = add({ parent: conv.leaf, role: "user", content: text });
  await answer(user);
}

async function resend(node, text) {
  node.editing = false;
  if (!text.trim()) { render(); return; }
  const user = add({ parent: node.parent, role: "user", content: text.trim() });
  await answer(user);
}

function editor(n) {
  const box = el("textarea", { class: "edit", rows: 3 }, n.content);
  return el("div", {}, box, el("div", { class: "row" },
    el("button", { class: "primary", onclick: () => resend(n, box.value) }, "send as a branch"),
    el("button", { onclick: () => { n.editing = false; renderMessages(); } }, "cancel")));
}

function switchTo(node, delta) {
  const sibs = children(node.parent);
  const next = sibs[(sibs.indexOf(node) + delta + sibs.length) % sibs.length];
  conv.leaf = deepest(next.id);
  render();
  save();
}

function messageView(n) {
  const sibs = children(n.parent).filter((s) => s.role === n.role);
  const who = el("div", { class: "who" }, el("strong", {}, n.role));
  if (sibs.length > 1) {
    const i = sibs.indexOf(n) + 1;
    who.append(el("button", { title: "previous branch", onclick: () => switchTo(n, -1) }, "‹"),
               el("span", { class: "branch" }, `${i}/${sibs.length}`),
               el("button", { title: "next branch", onclick: () => switchTo(n, 1) }, "›"));
  }
  const busy = !!controller;
  if (n.role === "user") who.append(el("button", { onclick: () => { n.editing = true; renderMessages(); }, disabled: busy }, "edit"));
  else who.append(el("button", { onclick: () => answer(conv.nodes[n.parent], true), disabled: busy }, "regenerate"));
  if (n.stopped) {
    who.append(el("span", { class: "badge stopped", title: "you stopped this reply: it is kept as far as it got and " +
                            "sent with the next message; regenerate replaces it" }, "stopped"));
  }
  if (n.ctx) who.append(el("span", { class: "muted" }, n.ctx));
  const box = el("div", { class: `msg ${n.role}${n.stopped ? " stopped" : ""}`, "data-role": n.role }, who);
  if (n.reasoning) box.append(el("details", {}, el("summary", {}, "reasoning"), el("div", {}, n.reasoning)));
  if (n.editing) box.append(editor(n));
  else box.append(n.role === "assistant" ? markdown(n.content) : el("div", { class: "text" }, n.content));
  for (const c of n.tool_calls || []) {
    box.append(el("div", { class: "tool" }, el("strong", {}, `tool call: ${c.function.name}`),
                  el("pre", {}, c.function.arguments)));
  }
  if (n.error) box.append(el("div", { class: "error" }, n.error));
  if (n.stopped) {
    box.append(el("div", { class: "muted", "data-stopped": "" },
                  n.content || n.reasoning ? "Stopped by you: the rest was not generated." : "Stopped before any text."));
  }
  const f = n.figures;
  if (f) {
    box.append(el("div", { class: "figures", "data-figures": "" },
      `${f.prompt} prompt tokens · ${f.cached} from the cache · ${f.generated} generated · ` +
      `${f.tps.toFixed(1)} tok/s · first token ${(f.ttft * 1000).toFixed(0)} ms`));
  }
  return box;
}

// The message pane is the chat's scroll area: it follows a growing reply while it is scrolled to the end
// (or always, with toEnd), and stays where the reader left it otherwise.
function renderMessages(toEnd = false) {
  const list = document.getElementById("messages");
  if (!list) return;
  const atEnd = toEnd || list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  list.replaceChildren(...(conv.leaf ? path(conv.leaf).map(messageView) : [el("p", { class: "muted" }, "Say something.")]));
  if (atEnd) list.scrollTop = list.scrollHeight;
  const stop = document.getElementById("stop");
  if (stop) stop.disabled = !controller;
}

function settingsView() {
  const s = conv.settings;
  const field = (label, key, attrs = {}) => el("label", {}, label, el("input", { id: `set-${key}`, value: s[key], ...attrs,
    oninput: (e) => { s[key] = e.target.value; } }));
  const picker = el("select", { id: "model", onchange: (e) => { conv.model = e.target.value; } },
    models.map((m) => el("option", { value: m.name, selected: m.name === conv.model },
      `${m.name} · ${bytes(m.size)} · ${m.details?.quantization_level || "?"} · ${m.details?.family || "?"}`)));
  return el("div", { class: "card settings" },
    el("label", {}, "Model", picker),
    el("label", {}, "System prompt", el("textarea", { id: "system", rows: 3,
      oninput: (e) => { conv.system = e.target.value; } }, conv.system)),
    field("Temperature", "temperature", { type: "number", step: "0.1", min: "0" }),
    field("Top p", "top_p", { type: "number", step: "0.05", min: "0", max: "1" }),
    field("Top k", "top_k", { type: "number", min: "0" }),
    field("Min p", "min_p", { type: "number", step: "0.01", min: "0", max: "1" }),
    field("Repeat penalty", "repeat_penalty", { type: "number", step: "0.05", min: "0" }),
    field("Max tokens", "max_tokens", { type: "number", min: "1" }),
    field("Seed", "seed", { type: "number" }),
    el("label", {}, "JSON schema (structured output)", el("textarea", { id: "schema", rows: 4,
      placeholder: '{"type": "object", ...}', oninput: (e) => { s.schema = e.target.value; } }, s.schema)),
    el("label", {}, "Tools (OpenAI's JSON array)", el("textarea", { id: "tools", rows: 4,
      placeholder: '[{"type": "function", "function": {"name": ...}}]', oninput: (e) => { s.tools = e.target.value; } },
      s.tools || "")));
}

function listConversations() {
  return sidebar.list({ current: () => conv?.id, open, changed: (id, title) => {
    if (conv?.id !== id) return;
    if (title === null) { controller?.abort(); fresh(); }
    else { conv.title = title; }
  } });
}

async function open(id) {
  conv = await api(`/studio/api/conversations/${id}`);
  render();
}

function fresh() {
  conv = blank(models[0]?.name ?? null);
  render();
}

export function render() {
  const root = view();
  root.replaceChildren(el("div", { class: "chat" },
    el("div", { class: "sidebar card" },
       el("button", { class: "primary", onclick: fresh, style: "width: 100%" }, "New chat"),
       el("div", { id: "conversations" })),
    el("div", { class: "pane" },
       el("div", { id: "messages", class: "messages" }),
       el("div", { class: "card composer" },
          el("textarea", { id: "prompt", rows: 3, placeholder: "Message (Enter sends, Shift+Enter: new line)",
            onkeydown: (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); } } }),
          el("div", { class: "row" }, el("button", { id: "send", class: "primary", onclick: send }, "Send"),
             el("button", { id: "stop", onclick: () => controller?.abort(), disabled: !controller }, "Stop")))),
    settingsView()));
  renderMessages(true);
  listConversations();
}

export async function show() {
  if (!models.length) models = (await api("/api/tags")).models;
  if (!conv) conv = blank(models[0]?.name ?? null);
  render();
}
