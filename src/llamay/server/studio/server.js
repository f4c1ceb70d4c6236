// Server: /metrics as small live plots (generated tok/s, queue depth, KV pages in use, prefix-cache hit rate).
import { call, el, plural } from "./util.js";

const N = 90; // samples kept (every 2 s: three minutes)
const series = { tps: [], queue: [], pages: [], hit: [] };
let timer = null, last = null;
const view = () => document.getElementById("view-server");

function parse(text) {
  const out = {};
  for (const line of text.split("\n")) {
    const m = line.match(/^([a-z_:]+)(\{[^}]*\})?\s+([-+0-9.eE]+)$/);
    if (m) out[m[1]] = (out[m[1]] || 0) + Number(m[3]);
  }
  return out;
}

function push(name, v) {
  series[name].push(v);
  if (series[name].length > N) series[name].shift();
}

function draw(canvas, values) {
  const w = canvas.width = canvas.clientWidth * devicePixelRatio, h = canvas.height = canvas.clientHeight * devicePixelRatio;
  const g = canvas.getContext("2d");
  g.clearRect(0, 0, w, h);
  if (values.length < 2) return;
  const max = Math.max(...values, 1e-9);
  g.strokeStyle = getComputedStyle(document.documentElement).getPropertyValue("--accent");
  g.lineWidth = 2 * devicePixelRatio;
  g.beginPath();
  values.forEach((v, i) => {
    const x = (i / (N - 1)) * w, y = h - (v / max) * (h - 4) - 2;
    if (i) g.lineTo(x, y); else g.moveTo(x, y);
  });
  g.stroke();
}

async function sample() {
  const r = await call("/metrics", { headers: { "x-llamay-client": "studio" } });  // a poll: serve does not log it
  const m = parse(await r.text()), now = performance.now();
  if (last) {
    const dt = (now - last.t) / 1000;
    push("tps", Math.max(0, (m.llamay_tokens_generated_total - last.m.llamay_tokens_generated_total) / dt));
    const prompt = m.llamay_prompt_tokens_total - last.m.llamay_prompt_tokens_total;
    const hit = m.llamay_prompt_cache_hit_tokens_total - last.m.llamay_prompt_cache_hit_tokens_total;
    push("hit", prompt > 0 ? hit / prompt : (series.hit.at(-1) ?? 0));
  }
  push("queue", m.llamay_queue_depth || 0);
  push("pages", m.llamay_kv_pages_used || 0);
  last = { m, t: now };
  const fmt = { tps: (v) => `${v.toFixed(1)} tok/s`, queue: (v) => `${v} waiting`,
                pages: (v) => `${v} / ${m.llamay_kv_pages_total || 0} pages`, hit: (v) => `${(100 * v).toFixed(0)}% cached` };
  for (const name of Object.keys(series)) {
    const card = document.getElementById(`plot-${name}`);
    if (!card) continue;
    card.querySelector(".value").textContent = fmt[name](series[name].at(-1) ?? 0);
    draw(card.querySelector("canvas"), series[name]);
  }
  document.getElementById("server-totals").textContent = `${plural(m.llamay_requests_total, "request")} · ` +
    `${plural(m.llamay_models_loaded, "model")} loaded · ${m.llamay_running_sequences || 0} generating`;
}

export async function show() {
  const plot = (name, title) => el("div", { class: "card plot", id: `plot-${name}` }, el("div", { class: "muted" }, title),
                                   el("div", { class: "value" }), el("canvas"));
  view().replaceChildren(el("div", { id: "server-totals", class: "card" }),
    el("div", { class: "plots" }, plot("tps", "Tokens generated per second"), plot("queue", "Queue depth"),
       plot("pages", "KV pages in use"), plot("hit", "Prefix-cache hit rate (prompt tokens)")));
  clearInterval(timer);
  await sample();
  timer = setInterval(() => { if (view().classList.contains("active")) sample().catch(() => {}); }, 2000);
}
