// Server: /metrics as small live plots with axes (generated tok/s, queue depth, KV pages in use, the cached
// share of recent prompts). Each plot starts with the value at page open; the series are kept across tabs.
import { call, el, plural } from "./util.js";

const WINDOW_S = 180; // seconds shown (a sample every 2 s)
const series = { tps: [], queue: [], pages: [], hit: [] }; // [{t: ms, v}], oldest first
let timer = null, last = null;
const view = () => document.getElementById("view-server");

const PLOTS = {
  tps: { title: "Tokens generated per second", unit: "tok/s", fmt: (v) => `${v.toFixed(1)} tok/s` },
  queue: { title: "Queue depth", unit: "requests", fmt: (v) => `${v} waiting` },
  pages: { title: "KV pages in use", unit: "pages", fmt: (v, m) => `${v} / ${m.llamay_kv_pages_total || 0} pages` },
  hit: { title: "Cached share of recent prompts", unit: "%", max: () => 100,
         fmt: (v) => v === null ? "no prompts yet" : `${v.toFixed(0)}% cached`,
         detail: (m) => m.llamay_recent_prompt_tokens ? `${m.llamay_recent_prompt_cache_hit_tokens} of ` +
           `${m.llamay_recent_prompt_tokens} prompt tokens from the cache` : "" },
};

function parse(text) {
  const out = {};
  for (const line of text.split("\n")) {
    const m = line.match(/^([a-z_:]+)(\{[^}]*\})?\s+([-+0-9.eE]+)$/);
    if (m) out[m[1]] = (out[m[1]] || 0) + Number(m[3]);
  }
  return out;
}

function push(name, t, v) {
  if (v === null || v === undefined || Number.isNaN(v)) return;
  const s = series[name];
  s.push({ t, v });
  while (s.length && s[0].t < t - WINDOW_S * 1000) s.shift();
}

// The values of this sample: gauges as read; tok/s from the last sample (at page open: 0 when nothing
// generates, else unknown until the next); the cached share over the server's recent requests.
function values(m, now) {
  const out = { queue: m.llamay_queue_depth || 0, pages: m.llamay_kv_pages_used || 0, tps: null, hit: null };
  if (last) out.tps = Math.max(0, (m.llamay_tokens_generated_total - last.m.llamay_tokens_generated_total) /
                                  ((now - last.t) / 1000));
  else if (!m.llamay_running_sequences) out.tps = 0;
  if (m.llamay_recent_prompt_tokens > 0) out.hit = 100 * m.llamay_recent_prompt_cache_hit_tokens / m.llamay_recent_prompt_tokens;
  return out;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, ...kids) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const kid of kids) node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return node;
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((k) => k * p).find((x) => x >= v);
}

const W = 300, H = 136, L = 40, R = 16, T = 20, B = 28; // the plot's box inside the SVG's units

// A plot of points (t, v) over the last WINDOW_S seconds: y from 0 to ymax in unit, x in seconds before now.
function draw(name, now, m) {
  const spec = PLOTS[name], points = series[name];
  const ymax = spec.max ? spec.max(m) : niceMax(Math.max(0, ...points.map((p) => p.v)));
  const x = (t) => L + (1 - (now - t) / (WINDOW_S * 1000)) * (W - L - R);
  const y = (v) => H - B - (v / ymax) * (H - B - T);
  const round = (v) => (Number.isInteger(v) ? v : v.toFixed(1));
  const yTicks = [0, ymax / 2, ymax].map((v) => svg("g", {},
    svg("line", { x1: L - 3, x2: W - R, y1: y(v), y2: y(v), class: v ? "grid" : "" }),
    svg("text", { x: L - 5, y: y(v) + 3, "text-anchor": "end" }, round(v))));
  const xTicks = [180, 120, 60, 0].map((s) => svg("text", { x: x(now - s * 1000), y: H - B + 12, "text-anchor": "middle" },
    s ? `-${s / 60} min` : "now"));
  const kids = [
    svg("g", { class: "axis axis-y" }, svg("line", { x1: L, x2: L, y1: T, y2: H - B }), ...yTicks,
        svg("text", { class: "unit", x: 2, y: 10 }, spec.unit)),
    svg("g", { class: "axis axis-x" }, svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B }), ...xTicks,
        svg("text", { class: "unit", x: (L + W - R) / 2, y: H - 2, "text-anchor": "middle" }, "time (minutes ago)")),
  ];
  const pts = points.map((p) => `${x(p.t).toFixed(1)},${y(Math.min(p.v, ymax)).toFixed(1)}`);
  if (pts.length) {
    kids.push(svg("polyline", { class: "line", points: pts.join(" ") }));
    const end = pts.at(-1).split(",");
    kids.push(svg("circle", { class: "point", cx: end[0], cy: end[1], r: 3 }));
  }
  return svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${spec.title}, ${spec.unit}` }, ...kids);
}

async function sample() {
  const r = await call("/metrics", { headers: { "x-llamay-client": "studio" } });  // a poll: serve does not log it
  const m = parse(await r.text()), now = Date.now();
  const v = values(m, now);
  for (const name of Object.keys(series)) push(name, now, v[name]);
  last = { m, t: now };
  for (const name of Object.keys(series)) {
    const card = document.getElementById(`plot-${name}`);
    if (!card) continue;
    const shown = name === "hit" ? v.hit : (series[name].at(-1)?.v ?? 0);
    card.querySelector(".value").textContent = PLOTS[name].fmt(shown, m);
    card.querySelector(".detail").textContent = PLOTS[name].detail?.(m) ?? "";
    card.querySelector("svg").replaceWith(draw(name, now, m));
  }
  document.getElementById("server-totals").textContent = `${plural(m.llamay_requests_total, "request")} · ` +
    `${plural(m.llamay_models_loaded, "model")} loaded · ${m.llamay_running_sequences || 0} generating`;
}

export async function show() {
  const plot = (name) => el("div", { class: "card plot", id: `plot-${name}` },
    el("div", { class: "muted" }, PLOTS[name].title), el("div", { class: "value" }),
    el("div", { class: "detail muted" }), svg("svg"));
  view().replaceChildren(el("div", { id: "server-totals", class: "card" }),
    el("div", { class: "plots" }, ...Object.keys(PLOTS).map(plot)));
  clearInterval(timer);
  await sample();
  timer = setInterval(() => { if (view().classList.contains("active")) sample().catch(() => {}); }, 2000);
}
