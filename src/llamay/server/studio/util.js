// Shared helpers: DOM building (text only: nothing a model or a file wrote is ever parsed as HTML),
// JSON calls that turn any API's error shape into one message, SSE and NDJSON readers, markdown.

export function el(tag, attrs = {}, ...kids) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v; // through the CSSOM: the page's CSP refuses style attributes
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined || kid === false) continue;
    node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return node;
}

export function errorText(body, status) {
  if (body && typeof body === "object") {
    const e = body.error;
    if (typeof e === "string") return e;
    if (e && e.message) return e.message;
  }
  return `HTTP ${status}`;
}

// The server's --api-key, asked for once when a call is refused with 401 and kept in this browser.
export function authHeaders() {
  const key = localStorage.getItem("llamay-api-key");
  return key ? { authorization: `Bearer ${key}` } : {};
}

function askForKey(status) {
  if (status !== 401) return false;
  const key = window.prompt("This server needs its API key (llamay serve --api-key):");
  if (!key) return false;
  localStorage.setItem("llamay-api-key", key);
  return true;
}

export async function call(path, init = {}) {
  for (;;) {
    const r = await fetch(path, { ...init, headers: { ...(init.headers || {}), ...authHeaders() } });
    if (!askForKey(r.status)) return r;
  }
}

export async function api(path, options = {}) {
  const init = { ...options, headers: { ...(options.headers || {}) } };
  if (options.json !== undefined) {
    init.body = JSON.stringify(options.json);
    init.headers["content-type"] = "application/json";
    init.method = init.method || "POST";
  }
  const r = await call(path, init);
  const text = await r.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = text; }
  if (!r.ok) throw new Error(errorText(body, r.status));
  return body;
}

async function* lines(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      yield buf.slice(0, i).replace(/\r$/, "");
      buf = buf.slice(i + 1);
    }
  }
  if (buf) yield buf;
}

async function opened(path, json, signal) {
  const r = await call(path, { method: "POST", headers: { "content-type": "application/json" },
                               body: JSON.stringify(json), signal });
  if (!r.ok) {
    let body = null;
    try { body = await r.json(); } catch { /* not JSON */ }
    throw new Error(errorText(body, r.status));
  }
  return r;
}

// Server-sent events of an OpenAI-style stream, opened (a refusal throws here): an async iterator of each
// parsed data object until [DONE].
export async function openSse(path, json, signal) {
  return events(await opened(path, json, signal));
}

async function* events(response) {
  for await (const line of lines(response)) {
    if (!line.startsWith("data:")) continue;
    const data = line.slice(5).trim();
    if (data === "[DONE]") return;
    const obj = JSON.parse(data);
    if (obj.error) throw new Error(errorText(obj, 500));
    yield obj;
  }
}

// Newline-delimited JSON (Ollama's streams).
export async function* ndjson(path, json, signal) {
  for await (const line of lines(await opened(path, json, signal))) {
    if (!line.trim()) continue;
    const obj = JSON.parse(line);
    if (obj.error) throw new Error(obj.error);
    yield obj;
  }
}

export function plural(n, word) {
  n = n || 0;
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

// Text with special tokens (<|im_start|>, <s>, [INST], ...) shown as marks and newlines as ↵.
export function readable(text) {
  return text.split(/(<\|[^|<>]{1,40}\|>|<\/?s>|\[\/?INST\]|\n)/).map((part, i) => i % 2 === 0 ? part :
    el("span", { class: "special" }, part === "\n" ? "↵" : part.replace(/^<\||\|>$/g, "")));
}

export function bytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

// -- markdown: blocks (fenced code, headings, lists, quotes, paragraphs) and inline code, bold, italics,
// links (http and https only). Built as DOM nodes with text content.

export function markdown(text) {
  const root = el("div", { class: "md" });
  const src = text.split("\n");
  let para = [];
  const flush = () => { if (para.length) root.append(el("p", {}, inline(para.join("\n")))); para = []; };
  for (let i = 0; i < src.length; i++) {
    const line = src[i];
    const fence = line.match(/^\s*```\s*([\w+-]*)/);
    if (fence) {
      flush();
      const code = [];
      for (i++; i < src.length && !/^\s*```/.test(src[i]); i++) code.push(src[i]);
      root.append(codeBlock(code.join("\n"), fence[1]));
      continue;
    }
    const head = line.match(/^(#{1,6})\s+(.*)/);
    const item = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)/);
    if (head) { flush(); root.append(el(`h${Math.min(head[1].length + 2, 6)}`, {}, inline(head[2]))); }
    else if (item) {
      flush();
      const ordered = /\d/.test(item[1]);
      let list = root.lastChild;
      if (!list || list.tagName !== (ordered ? "OL" : "UL")) root.append(list = el(ordered ? "ol" : "ul"));
      list.append(el("li", {}, inline(item[2])));
    } else if (line.startsWith(">")) { flush(); root.append(el("blockquote", {}, inline(line.replace(/^>\s?/, "")))); }
    else if (!line.trim()) flush();
    else para.push(line);
  }
  flush();
  return root;
}

function codeBlock(code, lang) {
  const copy = el("button", { class: "copy", title: "copy the code", onclick: async () => {
    await navigator.clipboard.writeText(code);
    copy.textContent = "copied";
    setTimeout(() => { copy.textContent = "copy"; }, 1500);
  } }, "copy");
  return el("pre", {}, copy, highlight(code, lang));
}

function inline(text) {
  const out = [];
  const re = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*\s][^*]*\*)|\[([^\]]+)\]\((https?:\/\/[^)\s]+)\)/g;
  let last = 0, m;
  while ((m = re.exec(text))) {
    if (m.index > last) out.push(text.slice(last, m.index));
    if (m[1]) out.push(el("code", {}, m[1].slice(1, -1)));
    else if (m[2]) out.push(el("strong", {}, m[2].slice(2, -2)));
    else if (m[3]) out.push(el("em", {}, m[3].slice(1, -1)));
    else out.push(el("a", { href: m[5], target: "_blank", rel: "noopener noreferrer" }, m[4]));
    last = re.lastIndex;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

const KEYWORDS = new Set(("def class return if elif else for while in import from as with try except finally raise " +
  "lambda yield async await pass break continue and or not is None True False function const let var new this " +
  "typeof instanceof switch case default throw catch do void delete export extends static struct enum fn pub " +
  "impl use mut match int char float double bool string public private protected package interface type go " +
  "func select where null true false").split(" "));

// A small tokenizer for any C-like or Python-like code: comments, strings, numbers and keywords.
export function highlight(code, lang) {
  const node = el("code", { class: lang ? `lang-${lang}` : "" });
  const re = /(#[^\n]*|\/\/[^\n]*|\/\*[\s\S]*?\*\/)|("(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|`(?:\\.|[^`\\])*`)|(\b\d+(?:\.\d+)?\b)|([A-Za-z_]\w*)/g;
  let last = 0, m;
  while ((m = re.exec(code))) {
    if (m.index > last) node.append(code.slice(last, m.index));
    const cls = m[1] ? "tok-c" : m[2] ? "tok-s" : m[3] ? "tok-n" : KEYWORDS.has(m[4]) ? "tok-k" : null;
    node.append(cls ? el("span", { class: cls }, m[0]) : m[0]);
    last = re.lastIndex;
  }
  if (last < code.length) node.append(code.slice(last));
  return node;
}

export function uid() {
  const a = new Uint8Array(9);
  crypto.getRandomValues(a);
  return Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
}
