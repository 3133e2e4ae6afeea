/* kvsim report: the animated memory map (plain canvas), the charts' cursor and the tables.
 * Reads the JSON in #kvsim-data, written by kvsim/report/build.py; plotly.js is inlined above.
 * Map blobs are zlib streams of frames x cells arrays (kvsim/report/mapcells.py): owner int32
 * (-1: none) and live/held/hole uint8 shares (0-255) of a cell's slots. When done, sets
 * document.body.dataset.ready = "true" (the browser test waits for it). */
"use strict";

const EMPTY = "#5c0a0a"; // allocated but holding no token
const FREE = "#e9e9e9";
const CANVAS_ASPECT = 1.7; // width / height of the map grid
const TICK_MS = 120; // animation step

const DATA = JSON.parse(document.getElementById("kvsim-data").textContent);
const colorCache = new Map();

/** A stable colour per req_id (golden-angle hues; never as dark as EMPTY). */
function reqColor(id) {
  let c = colorCache.get(id);
  if (c === undefined) {
    c = `hsl(${((id * 137.508) % 360).toFixed(1)},70%,${48 + (id % 3) * 8}%)`;
    colorCache.set(id, c);
  }
  return c;
}

function el(tag, attrs = {}, text = null) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  return node;
}

/** How the page prints a summary or config value (the browser test parses it back). */
function fmt(v) {
  if (v === null || v === undefined) return "n/a";
  if (typeof v === "object") return JSON.stringify(v);
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return v.toLocaleString("en-US");
  if (Math.abs(v) >= 1000) return v.toLocaleString("en-US", { maximumFractionDigits: 1 });
  return String(Number(v.toPrecision(4)));
}

const int = (v) => Math.round(v).toLocaleString("en-US");

async function inflate(b64) {
  const text = atob(b64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

function hatch() {
  const tile = document.createElement("canvas");
  tile.width = tile.height = 6;
  const g = tile.getContext("2d");
  g.fillStyle = "#f6d2a8";
  g.fillRect(0, 0, 6, 6);
  g.strokeStyle = "#c0641a";
  g.lineWidth = 1.4;
  g.beginPath();
  g.moveTo(0, 6);
  g.lineTo(6, 0);
  g.stroke();
  return tile;
}

class MapPanel {
  constructor(run, index, parent) {
    this.run = run;
    this.map = run.map;
    const box = el("div", { class: "panel", id: `map-panel-${index}` });
    const title = el("h3");
    title.append(el("span", { class: "run-dot", style: `background:${run.color}` }), run.name);
    box.append(title, el("div", { class: "note" }, run.description));
    parent.append(box);
    if (!this.map) {
      box.append(el("p", { class: "map-missing" }, run.map_missing));
      return;
    }
    const m = this.map;
    this.canvas = el("canvas", { "aria-label": `memory map of ${run.name}` });
    this.status = el("div", { class: "map-status mono" });
    this.hover = el("div", { class: "note mono panel-hover" },
      "hover a cell for its slots and owner");
    this.waiting = el("div", { class: "waiting" });
    const kept = m.time_s.length;
    let note = `${int(m.capacity_slots)} slots in ${int(m.num_cells)} cells of ` +
      `${int(m.slots_per_cell)} slots` +
      (m.block_size_slots ? ` (${m.slots_per_cell / m.block_size_slots} block(s) of ` +
        `${m.block_size_slots})` : "") + ". ";
    note += kept < m.num_frames_captured
      ? `Downsampled: showing ${int(kept)} of ${int(m.num_frames_captured)} captured frames ` +
        `(about every ${Math.round(m.num_frames_captured / kept)}th).`
      : `All ${int(kept)} captured frames.`;
    box.append(this.canvas, this.status, el("div", { class: "note" }, "waiting (front first):"),
      this.waiting, this.hover, el("p", { class: "note map-note" }, note));
    this.frame = 0;
    this.canvas.addEventListener("mousemove", (e) => this.showCell(e));
  }

  async decode() {
    if (!this.map) return;
    const m = this.map;
    const owner = await inflate(m.owner);
    this.owner = new Int32Array(owner.buffer, 0, owner.byteLength / 4);
    this.live = await inflate(m.live);
    this.held = await inflate(m.held);
    this.hole = await inflate(m.hole);
    this.layout();
  }

  layout() {
    const m = this.map;
    this.cols = Math.max(1, Math.ceil(Math.sqrt(m.num_cells * CANVAS_ASPECT)));
    const rows = Math.ceil(m.num_cells / this.cols);
    const width = Math.max(200, this.canvas.clientWidth || 600);
    const ratio = window.devicePixelRatio || 1;
    this.size = Math.max(2, Math.floor((width * ratio) / this.cols));
    this.canvas.width = this.cols * this.size;
    this.canvas.height = rows * this.size;
    this.canvas.style.height = `${(this.canvas.height / ratio).toFixed(0)}px`;
    this.ctx = this.canvas.getContext("2d");
    this.pattern = this.ctx.createPattern(hatch(), "repeat");
  }

  frameAt(t) {
    const times = this.map.time_s;
    let lo = 0, hi = times.length - 1;
    while (lo < hi) { // last frame at or before t
      const mid = (lo + hi + 1) >> 1;
      if (times[mid] <= t + 1e-9) lo = mid; else hi = mid - 1;
    }
    return lo;
  }

  show(t) {
    if (!this.map) return;
    this.frame = this.frameAt(t);
    this.draw();
    this.describeCell();
    const m = this.map, f = this.frame;
    const head = m.waiting[f] ? `, head needs ${int(m.head_need_slots[f])} slots` : "";
    this.status.textContent =
      `t = ${m.time_s[f].toFixed(2)} s (frame ${m.frame[f]}): ${int(m.running[f])} running, ` +
      `${int(m.waiting[f])} waiting${head}. Allocated ${int(m.held_slots[f])} slots ` +
      `(live ${int(m.live_slots[f])}), holes ${int(m.hole_slots[f])}, ` +
      `free ${int(m.free_slots[f])}.`;
    this.waiting.replaceChildren(...m.waiting_ids[f].map((id) =>
      el("span", { class: "chip", style: `background:${reqColor(id)}` }, String(id))));
    const more = m.waiting[f] - m.waiting_ids[f].length;
    if (more > 0) this.waiting.append(el("span", { class: "note" }, `+${int(more)} more`));
    if (!m.waiting[f]) this.waiting.append(el("span", { class: "note" }, "none"));
  }

  draw() {
    const m = this.map, n = m.num_cells, ctx = this.ctx, size = this.size;
    const inner = size >= 6 ? size - 1 : size;
    const base = this.frame * n;
    ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    for (let c = 0; c < n; c++) {
      const x = (c % this.cols) * size, y = Math.floor(c / this.cols) * size;
      const slots = Math.min(m.slots_per_cell, m.capacity_slots - c * m.slots_per_cell);
      const w = (inner * slots) / m.slots_per_cell;
      const held = (this.held[base + c] * inner) / 255;
      const live = (this.live[base + c] * inner) / 255;
      const hole = (this.hole[base + c] * inner) / 255;
      ctx.fillStyle = FREE;
      ctx.fillRect(x, y, w, inner);
      if (held > 0) {
        ctx.fillStyle = EMPTY;
        ctx.fillRect(x, y, held, inner);
      }
      if (live > 0) {
        ctx.fillStyle = reqColor(this.owner[base + c]);
        ctx.fillRect(x, y, live, inner);
      }
      if (hole > 0) {
        ctx.fillStyle = this.pattern;
        ctx.fillRect(x + held, y, hole, inner);
      }
    }
  }

  showCell(e) {
    const rect = this.canvas.getBoundingClientRect();
    const scale = this.canvas.width / rect.width;
    const col = Math.floor(((e.clientX - rect.left) * scale) / this.size);
    const row = Math.floor(((e.clientY - rect.top) * scale) / this.size);
    const c = row * this.cols + col;
    if (col >= this.cols || c >= this.map.num_cells) return;
    this.hoverCell = c;
    this.describeCell();
  }

  describeCell() {
    const c = this.hoverCell, m = this.map;
    if (c === undefined) return;
    const i = this.frame * m.num_cells + c, pct = (v) => `${Math.round((v * 100) / 255)}%`;
    const owner = this.owner[i] >= 0 ? `req ${this.owner[i]}` : "no owner";
    this.hover.textContent = `slots ${int(c * m.slots_per_cell)}-` +
      `${int(Math.min((c + 1) * m.slots_per_cell, m.capacity_slots) - 1)}: ${owner}; ` +
      `live ${pct(this.live[i])}, allocated ${pct(this.held[i])}, hole ${pct(this.hole[i])}`;
  }
}

function legend() {
  const items = [
    ["linear-gradient(90deg,hsl(20,70%,48%),hsl(157,70%,56%),hsl(295,70%,64%))",
      "token states (one colour per request; share of the cell = live tokens)"],
    [EMPTY, "allocated, empty (reservation, internal fragmentation)"],
    [`repeating-linear-gradient(135deg,#f6d2a8 0 3px,#c0641a 3px 4px)`,
      "hole: free but cannot serve the head of the queue (external fragmentation & other)"],
    [FREE, "free"],
  ];
  document.getElementById("map-legend").replaceChildren(...items.map(([bg, text]) => {
    const li = el("li");
    li.append(el("span", { class: "swatch", style: `background:${bg}` }), text);
    return li;
  }));
}

function timeGrid(panels) {
  const times = new Set();
  for (const p of panels) if (p.map) p.map.time_s.forEach((t) => times.add(t));
  if (times.size) return [...times].sort((a, b) => a - b);
  const end = Math.max(...DATA.runs.map((r) => r.end_s)); // no map anywhere: the charts' range
  return Array.from({ length: 401 }, (_, i) => (end * i) / 400);
}

function cursorShape(t) {
  return { type: "line", xref: "x", yref: "paper", x0: t, x1: t, y0: 0, y1: 1,
    line: { color: "#111", width: 1.5, dash: "dot" } };
}

function compareTable(table, rows, runs, valueOf, sections = null) {
  const head = el("tr");
  head.append(el("th", {}, ""));
  runs.forEach((r) => head.append(el("th", {}, r.name)));
  table.replaceChildren(head);
  for (const [key, label, section] of rows) {
    if (section) {
      const tr = el("tr", { class: "section" });
      tr.append(el("th", { colspan: String(runs.length + 1) }, section));
      table.append(tr);
      continue;
    }
    const values = runs.map((r) => valueOf(r, key));
    const tr = el("tr", { "data-key": key });
    if (runs.length > 1 && new Set(values.map(fmt)).size > 1) tr.classList.add("differs");
    tr.append(el("td", {}, label));
    values.forEach((v, i) => tr.append(el("td", { "data-run": String(i), class: "mono" }, fmt(v))));
    table.append(tr);
  }
}

function tables() {
  const runs = DATA.runs, summaryOf = (r, k) => r.summary[k];
  const rows = [];
  for (const [section, items] of DATA.headline) {
    rows.push([null, null, section]);
    for (const [key, label] of items) rows.push([key, label, null]);
  }
  compareTable(document.getElementById("summary-table"), rows, runs, summaryOf);
  const keys = [...new Set(runs.flatMap((r) => Object.keys(r.summary)))].sort();
  compareTable(document.getElementById("all-metrics"), keys.map((k) => [k, k, null]), runs,
    summaryOf);
  const configOf = (r, k) => r.config[k];
  const cfg = [...new Set(runs.flatMap((r) => Object.keys(r.config)))].sort();
  const differs = cfg.filter((k) => new Set(runs.map((r) => fmt(r.config[k]))).size > 1);
  compareTable(document.getElementById("config-diff"),
    (runs.length > 1 ? differs : ["model.name", "gpu.name", "cache.allocator"])
      .map((k) => [k, k, null]), runs, configOf);
  compareTable(document.getElementById("config-all"), cfg.map((k) => [k, k, null]), runs,
    configOf);
}

async function main() {
  const cols = String(Math.min(DATA.runs.length, 2));
  const list = document.getElementById("run-list");
  for (const run of DATA.runs) {
    const li = el("li");
    li.append(el("span", { class: "run-dot", style: `background:${run.color}` }),
      `${run.name}: ${run.description} (${run.path})`);
    list.append(li);
  }
  if (DATA.runs.some((r) => r.map)) legend();
  const mapBox = document.getElementById("map-panels");
  mapBox.style.setProperty("--cols", cols);
  const panels = DATA.runs.map((run, i) => new MapPanel(run, i, mapBox));
  await Promise.all(panels.map((p) => p.decode()));

  const plotConfig = { displaylogo: false, responsive: true };
  const memBox = document.getElementById("memory-panels");
  memBox.style.setProperty("--cols", cols);
  const charts = [];
  for (const [i, run] of DATA.runs.entries()) {
    const box = el("div", { class: "panel" });
    const title = el("h3");
    title.append(el("span", { class: "run-dot", style: `background:${run.color}` }), run.name);
    const div = el("div", { id: `memory-chart-${i}` });
    const bins = run.num_memory_points;
    const note = bins < run.num_memory_events
      ? `Downsampled: ${int(run.num_memory_events)} engine events averaged over equal time ` +
        `bins (${int(bins)} points).`
      : `${int(run.num_memory_events)} engine events.`;
    box.append(title, div, el("p", { class: "note" }, note));
    memBox.append(box);
    const fig = run.memory_figure;
    await Plotly.newPlot(div, fig.data, fig.layout, plotConfig);
    charts.push({ div, shapes: fig.layout.shapes || [] });
  }
  const ecdf = DATA.ecdf_figure;
  await Plotly.newPlot("ecdf", ecdf.data, ecdf.layout, plotConfig);
  const n = Math.max(...DATA.runs.map((r) => r.summary.num_requests || 0));
  document.getElementById("ecdf-note").textContent = n > 2000
    ? "Each ECDF is drawn through at most 2,000 of its requests' values (evenly spaced ranks)."
    : "Each ECDF shows every finished request (x: log scale; TPOT needs two output tokens).";
  tables();

  const times = timeGrid(panels);
  const slider = document.getElementById("time-slider");
  const label = document.getElementById("time-label");
  slider.max = String(times.length - 1);
  let pending = false;
  const update = () => {
    const t = times[Number(slider.value)];
    label.textContent = `t = ${t.toFixed(2)} s`;
    panels.forEach((p) => p.show(t));
    if (pending) return; // the charts' cursor at most once per animation frame
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      const now = times[Number(slider.value)];
      charts.forEach((c) => Plotly.relayout(c.div, { shapes: [...c.shapes, cursorShape(now)] }));
    });
  };
  slider.addEventListener("input", update);
  charts.forEach((c) => c.div.on("plotly_click", (ev) => {
    const x = ev.points[0].x;
    let i = times.findIndex((t) => t > x);
    i = i < 0 ? times.length - 1 : Math.max(0, i - 1);
    slider.value = String(i);
    update();
  }));
  const play = document.getElementById("play");
  let timer = null;
  const stop = () => { clearInterval(timer); timer = null; play.innerHTML = "&#9654; play"; };
  play.addEventListener("click", () => {
    if (timer) return stop();
    if (Number(slider.value) >= times.length - 1) slider.value = "0";
    play.innerHTML = "&#10074;&#10074; pause";
    timer = setInterval(() => {
      const step = Number(document.getElementById("speed").value);
      slider.value = String(Math.min(times.length - 1, Number(slider.value) + step));
      update();
      if (Number(slider.value) >= times.length - 1) stop();
    }, TICK_MS);
  });
  window.addEventListener("resize", () => {
    panels.forEach((p) => p.map && p.layout());
    update();
  });
  slider.value = String(Math.floor(times.length / 2));
  update();
  document.body.dataset.ready = "true";
}

main().catch((err) => {
  const banner = el("div", { id: "error-banner" }, `The report failed to render: ${err}`);
  document.body.prepend(banner);
  console.error(err);
});
