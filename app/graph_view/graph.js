// The workbench's circuit graph: the layout app/graph_view/layout.py computed (finished coordinates), with
// pan/zoom, labels placed by zoom level (strongest first, never overlapping), hover details computed here (no
// server round trip), click selection over the whole node, a details panel beside the graph, pins, named
// groups, notes and a pinned-subgraph view. Annotations go to Python as the state value `annotations`; a click
// as the trigger `clicked`. No network: plain DOM, no libraries. Every text from a file is set with
// textContent, never parsed as HTML.
//
// Why edges are on a canvas and nodes in SVG: 2,000 SVG edges (with their hit areas) cost the browser a style
// and layout pass over ~6,000 elements per draw and per hover highlight; on a canvas they are a few batched
// strokes (one per colour and width step), hit-tested here on a grid of sampled segments. Nodes stay SVG
// elements (a few hundred at most, the view bounds them in Python): they take clicks and carry their ids.
// Pins, groups and notes restyle the drawn nodes in place; only a new graph or the pinned subgraph redraws.

const SVG = "http://www.w3.org/2000/svg";
const APPS = new WeakMap();
const COLOUR = { input: "#6b6b6b", head: "#f28e2b", mlp: "#59a14f", logits: "#9467bd", feature: "#4e79a7", error: "#bab0ac", embedding: "#6b6b6b", logit: "#9467bd" };
const SIGN = ["#b2182b", "#2166ac"]; // negative, positive
// the intervention check's verdicts (schema v1: confirmed | failed; v2: the words below), each a colour and dash of
// its own, none like a plain link (solid, its sign's red or blue); a word this view does not know is "checked"
const VERDICT = {
  failed: { colour: "#111111", dash: [7, 4], label: "failed the check" },
  "under-predicted": { colour: "#ff7f0e", dash: [2, 3], label: "under-predicted (measured larger)" },
  "over-predicted": { colour: "#17becf", dash: [9, 3], label: "over-predicted (measured smaller)" },
  "sign-flipped": { colour: "#e377c2", dash: [6, 2, 2, 2], label: "sign-flipped" },
  absent: { colour: "#8c564b", dash: [1, 3], label: "absent (no measured effect)" },
  checked: { colour: "#999999", dash: [4, 2], label: "checked (a verdict this view does not know)" },
};
const verdictOf = (c) => (!c || c === "confirmed" ? null : VERDICT[c] ? c : "checked"); // null: plain style
const DIFF = { both: "#8c8c8c", a: "#1f77b4", b: "#e6550d" };
const GROUP_COLOURS = ["#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"];
const TOP = 5;
const STEPS = 12; // edge widths drawn in this many steps (one canvas stroke per colour and step)
const ALPHA = { rest: 0.6, dim: 0.12, lit: 0.95 };
const CELL = 40; // px (graph units) of the hit-test grid
const HIT_PX = 5; // an edge under the pointer: within this many screen px
const SAMPLES = 12; // segments per edge curve for hit tests
const READABLE = 0.8; // the zoom an upward graph too wide to fit opens at (its nodes 22 x 16 px)
const MIN_FIT = 0.35; // an upward graph fits the stage on open when that leaves its nodes at least this zoom
const MIN_FIT_WIDE = 0.2; // a layer-column graph likewise (in the circuit page's ~940 px, 12 layers fit at ~0.22, 30 at 0.12)
const LINK_CAP = 150; // an upward graph's links drawn at rest: the strongest this many (the user raises it)
const RESEND_MS = 4000; // a change of the marks not echoed by Python within this long is sent again
const RESENDS = 30;
const DRAG_PX = 6; // a press on a node that moves this many screen px is a drag (drag-to-group), not a click
const FOCUS_EDGES = 400; // the most links of one selected or pinned node drawn beside them

function el(tag, attrs = {}, parent = null, text = null) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

const fmt = (v) => (v === null || v === undefined ? "-" : Math.abs(v) >= 100 ? v.toFixed(1) : v.toPrecision(3));
const portName = (e) => (e.port ? `<${e.port}>` : "");
const viewSettings = (s) => ({ link_cap: s?.link_cap ?? null, node_threshold: s?.node_threshold ?? null, edge_threshold: s?.edge_threshold ?? null, collapsed: s?.collapsed || [] });
const frame = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));

function edgeRows(c) {
  // the edges as layout.wire sends them (one array per field, end points flat) back into one object each
  return c.s.map((s, j) => ({
    s, t: c.t[j], port: c.port[j], w: c.w[j], lift: c.lift[j], p: c.p.slice(4 * j, 4 * j + 4),
    wb: c.wb ? c.wb[j] : null, status: c.status ? c.status[j] : "both",
    heads: c.heads ? c.heads[j] : null, check: c.check ? c.check[j] : null, qk: c.qk ? c.qk[j] : null,
  }));
}

function curve(e, up) {
  // an edge that skips columns arcs over the nodes between, higher the further it goes; in an upward graph
  // (layers bottom to top) it leaves its writer's top and bends into its reader's bottom
  const [x0, y0, x1, y1] = e.p;
  if (up) {
    const dy = Math.max(20, Math.abs(y1 - y0) / 2);
    return [x0, y0, x0, y0 - dy, x1, y1 + dy, x1, y1];
  }
  const dx = Math.max(30, Math.abs(x1 - x0) / 2), lift = e.lift || 0;
  return [x0, y0, x0 + dx, y0 - lift, x1 - dx, y1 - lift, x1, y1];
}

function bezier(c, t) {
  const u = 1 - t, a = u * u * u, b = 3 * u * u * t, d = 3 * u * t * t, f = t * t * t;
  return [a * c[0] + b * c[2] + d * c[4] + f * c[6], a * c[1] + b * c[3] + d * c[5] + f * c[7]];
}

function segDist2(px, py, s) {
  const [ax, ay, bx, by] = s, dx = bx - ax, dy = by - ay;
  const t = Math.max(0, Math.min(1, ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy || 1)));
  const x = ax + t * dx - px, y = ay + t * dy - py;
  return x * x + y * y;
}

class EdgeLayer {
  // the drawn edges on one canvas under the SVG: batched strokes, a lit set, hit tests on a segment grid
  constructor(parent) {
    this.canvas = el("canvas", { class: "wbg-canvas" }, parent);
    this.ctx = this.canvas.getContext("2d");
    this.lit = null;
  }

  set(edges, style, up) {
    this.curves = edges.map((e) => curve(e, up));
    this.style = edges.map(style); // [colour, width step, dash pattern ("": solid)]
    this.grid = null;
    this.lit = null;
    this.base = new Set(edges.keys()); // drawn at rest; the lit ones (a hovered node's) are drawn besides
  }

  drawn(j) {
    return this.base.has(j) || (this.lit !== null && this.lit.has(j));
  }

  draw(t, w, h) {
    const c = this.canvas, dpr = window.devicePixelRatio || 1;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(h * dpr);
    }
    const ctx = this.ctx;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, c.width, c.height);
    ctx.setTransform(dpr * t.k, 0, 0, dpr * t.k, dpr * t.x, dpr * t.y);
    const batches = new Map();
    this.style.forEach(([colour, step, dash], j) => {
      if (!this.drawn(j)) return;
      const tier = this.lit ? (this.lit.has(j) ? "lit" : "dim") : "rest";
      const key = `${tier === "lit" ? 1 : 0}|${tier}|${colour}|${step}|${dash}`;
      if (!batches.has(key)) batches.set(key, []);
      batches.get(key).push(j);
    });
    for (const key of [...batches.keys()].sort()) {
      const [, tier, colour, step, dash] = key.split("|");
      ctx.setLineDash(dash ? dash.split(",").map(Number) : []);
      ctx.globalAlpha = tier === "rest" ? this.restAlpha() : ALPHA[tier];
      ctx.strokeStyle = colour;
      ctx.lineWidth = 0.8 + (4.2 * Number(step)) / STEPS;
      ctx.beginPath();
      for (const j of batches.get(key)) {
        const b = this.curves[j];
        ctx.moveTo(b[0], b[1]);
        ctx.bezierCurveTo(b[2], b[3], b[4], b[5], b[6], b[7]);
      }
      ctx.stroke();
    }
    ctx.globalAlpha = 1;
    ctx.setLineDash([]);
  }

  restAlpha() {
    // many links at rest are drawn fainter (the overlap still shows where they run together): 0.6 up to 300
    return Math.max(0.18, ALPHA.rest * Math.sqrt(Math.min(1, 300 / Math.max(1, this.base.size))));
  }

  index() {
    // each curve sampled into segments, filed under every grid cell its box touches (built on the first hover)
    this.grid = new Map();
    this.curves.forEach((c, j) => {
      let prev = bezier(c, 0);
      for (let i = 1; i <= SAMPLES; i++) {
        const next = bezier(c, i / SAMPLES), seg = [prev[0], prev[1], next[0], next[1], j];
        for (let gx = Math.floor(Math.min(seg[0], seg[2]) / CELL); gx <= Math.floor(Math.max(seg[0], seg[2]) / CELL); gx++) {
          for (let gy = Math.floor(Math.min(seg[1], seg[3]) / CELL); gy <= Math.floor(Math.max(seg[1], seg[3]) / CELL); gy++) {
            const k = `${gx},${gy}`;
            if (!this.grid.has(k)) this.grid.set(k, []);
            this.grid.get(k).push(seg);
          }
        }
        prev = next;
      }
    });
  }

  hit(x, y, r) {
    // the edge nearest to graph point (x, y) within r graph units, or -1
    if (!this.grid) this.index();
    let best = -1, bestD = r * r;
    for (let gx = Math.floor((x - r) / CELL); gx <= Math.floor((x + r) / CELL); gx++) {
      for (let gy = Math.floor((y - r) / CELL); gy <= Math.floor((y + r) / CELL); gy++) {
        for (const s of this.grid.get(`${gx},${gy}`) || []) {
          const d = this.drawn(s[4]) ? segDist2(x, y, s) : Infinity;
          if (d <= bestD) [best, bestD] = [s[4], d];
        }
      }
    }
    return best;
  }
}

class GraphApp {
  constructor(parent, api) {
    this.api = api;
    this.ann = { pinned: [], groups: [], notes: {} };
    this.seen = null; // the last annotations Python sent: a change there (Back/Forward, a link) wins
    this.seq = 0; // the number of our last change of the marks (send)
    this.echo = 0;
    this.graphKey = null;
    this.t = { k: 1, x: 0, y: 0 };
    this.size = { w: 800, h: 500 };
    this.subgraph = false;
    this.selected = null;
    this.collapsed = new Set(); // names of the groups drawn as one supernode in the full graph
    this.nodeT = 1;
    this.edgeT = 1; // influence thresholds (1: nothing pruned beyond what the file holds)
    this.showFailed = true;
    this.link = null; // the selected link [source id, target id]: the panel shows it (selectLink)
    this.picked = new Set(); // the pins selected for the next group (ctrl-click, or "select for group")
    this.root = el("div", { class: "wbg" }, parent);
    this.head = el("div", { class: "wbg-head" }, this.root);
    const bar = el("div", { class: "wbg-bar" }, this.root);
    this.fitBtn = el("button", { class: "wbg-fit" }, bar, "fit");
    this.subBtn = el("button", { class: "wbg-sub" }, bar, "pinned subgraph");
    this.groupName = el("input", { class: "wbg-group-name", placeholder: "group name" }, bar);
    this.groupBtn = el("button", { class: "wbg-group" }, bar, "group selected pins (0)");
    this.clearBtn = el("button", { class: "wbg-clear" }, bar, "unpin all");
    this.status = el("span", { class: "wbg-status" }, bar);
    const filters = el("div", { class: "wbg-bar wbg-filters" }, this.root);
    const capLabel = el("label", {}, filters, "links drawn at rest ");
    this.capInput = el("input", { class: "wbg-cap", type: "number", min: 0, step: 50, "data-testid": "graph-link-cap" }, capLabel);
    this.pruneBox = el("span", { class: "wbg-prune" }, filters);
    this.nodeTInput = this.slider(this.pruneBox, "node influence", "graph-node-threshold", (v) => (this.nodeT = v));
    this.edgeTInput = this.slider(this.pruneBox, "edge influence", "graph-edge-threshold", (v) => (this.edgeT = v));
    const failed = el("label", { class: "wbg-check-filter" }, filters);
    this.failedInput = el("input", { type: "checkbox", "data-testid": "graph-show-failed" }, failed);
    failed.append(" show what the intervention check did not confirm");
    this.groupBar = el("span", { class: "wbg-groups" }, filters);
    this.stats = el("div", { class: "wbg-stats", "data-testid": "graph-stats" }, this.root);
    this.legend = el("div", { class: "wbg-legend", "data-testid": "graph-legend" }, this.root);
    const main = el("div", { class: "wbg-main" }, this.root);
    this.stage = el("div", { class: "wbg-stage" }, main);
    this.edges = new EdgeLayer(this.stage);
    this.svg = el("svg:svg", { class: "wbg-svg" }, this.stage);
    this.vp = el("svg:g", {}, this.svg);
    this.nodeLayer = el("svg:g", { class: "wbg-nodes" }, null);
    this.hullLayer = el("svg:g", { class: "wbg-hulls" }, null); // outlines of the expanded groups, under the nodes
    this.labels = el("svg:g", { class: "wbg-labels" }, this.svg);
    this.panel = el("div", { class: "wbg-details", "data-testid": "graph-details" }, main);
    this.tip = el("div", { class: "wbg-tip", "data-testid": "graph-tip" }, this.root);
    this.wire();
    this.wireNodes();
    this.wireDragGroup();
    new ResizeObserver(() => this.measure()).observe(this.stage);
  }

  slider(parent, label, testid, set) {
    // a threshold in [0.05, 1]: circuit-tracer's pruning redrawn here, with no server round trip
    const box = el("label", {}, parent, `${label} `);
    const input = el("input", { type: "range", min: 0.05, max: 1, step: 0.01, value: 1, "data-testid": testid }, box);
    const out = el("span", { class: "wbg-t" }, box, "1.00");
    input.oninput = () => {
      set(Number(input.value));
      out.textContent = Number(input.value).toFixed(2);
      this.reprune();
    };
    input.onchange = () => this.sendView(); // on release: one URL entry per setting, not one per step
    return input;
  }

  reprune() {
    this.kept = this.prune();
    this.render();
  }

  wire() {
    this.capInput.onchange = () => {
      this.linkCap = Math.max(0, Number(this.capInput.value) || 0);
      this.focus();
      this.sendView();
    };
    this.failedInput.onchange = () => {
      this.showFailed = this.failedInput.checked;
      this.reprune();
    };
    this.fitBtn.onclick = () => this.fit();
    this.subBtn.onclick = () => {
      this.subgraph = !this.subgraph;
      this.render();
    };
    this.groupBtn.onclick = () => this.group();
    this.clearBtn.onclick = () => {
      this.ann.pinned = [];
      this.commit();
    };
    this.svg.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const r = this.svg.getBoundingClientRect();
      const f = Math.exp(-ev.deltaY * 0.0015);
      const mx = ev.clientX - r.left, my = ev.clientY - r.top;
      this.t.x = mx - (mx - this.t.x) * f;
      this.t.y = my - (my - this.t.y) * f;
      this.t.k *= f;
      this.transform();
    }, { passive: false });
    let drag = null;
    this.svg.addEventListener("pointerdown", (ev) => {
      if (ev.target.closest && ev.target.closest(".wbg-node")) return;
      drag = { x: ev.clientX, y: ev.clientY, tx: this.t.x, ty: this.t.y };
      this.svg.setPointerCapture(ev.pointerId);
    });
    this.svg.addEventListener("pointermove", (ev) => {
      if (!drag) return this.hoverEdge(ev);
      this.t.x = drag.tx + ev.clientX - drag.x;
      this.t.y = drag.ty + ev.clientY - drag.y;
      this.transform();
    });
    this.svg.addEventListener("pointerup", (ev) => {
      // a press that did not drag is a click: on a link, its details (and why its heads attend there)
      const press = drag;
      drag = null;
      const e = press && Math.hypot(ev.clientX - press.x, ev.clientY - press.y) < 4 ? this.edgeAt(ev) : null;
      if (e) this.selectLink(e);
    });
    this.svg.addEventListener("pointerleave", () => this.hideTip());
  }

  wireNodes() {
    this.root.addEventListener("click", (ev) => (this.clickAt = ev.timeStamp), true); // when a mark change began
    // one listener per event for every node (not three per node): the node is found from the event's target
    const nodeOf = (ev) => {
      const g = ev.target.closest && ev.target.closest(".wbg-node");
      return g ? this.nodeById.get(g.getAttribute("data-node-id")) : null;
    };
    this.nodeLayer.addEventListener("pointerover", (ev) => {
      const n = nodeOf(ev);
      if (n && n !== this.hovered) this.tipNode(n, ev);
    });
    this.nodeLayer.addEventListener("pointerout", (ev) => {
      const to = ev.relatedTarget && ev.relatedTarget.closest ? ev.relatedTarget.closest(".wbg-node") : null;
      if (!to || !this.nodeLayer.contains(to)) this.hideTip();
    });
    this.nodeLayer.addEventListener("pointermove", (ev) => this.moveTip(ev));
    this.nodeLayer.addEventListener("click", (ev) => {
      const n = nodeOf(ev);
      if (!n) return;
      ev.stopPropagation();
      if (ev.shiftKey) this.togglePin(n.id);
      else if (ev.ctrlKey || ev.metaKey || ev.altKey) this.togglePick(n.id);
      else this.select(n.id, true);
    });
  }

  // ---------------------------------------------------------------- drag-to-group

  wireDragGroup() {
    // a node dragged onto another node (or into a group's outline, or onto a supernode) joins it in a group: the
    // same marks "group selected pins" makes (in the URL and downloads); a press that does not move stays a click,
    // and a drag on the background still pans (the svg's own handlers never see a press on a node)
    let drag = null;
    const move = (ev) => {
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (!drag.moved && Math.hypot(dx, dy) < DRAG_PX) return;
      drag.moved = true;
      drag.el.setAttribute("transform", `translate(${dx / this.t.k},${dy / this.t.k})`);
      const target = this.dropTarget(ev, drag.id);
      this.nodeEls.forEach((g, id) => g.classList.toggle("wbg-drop", !!target && target.node === id));
      this.hullLayer.querySelectorAll(".wbg-hull").forEach((h) => h.classList.toggle("wbg-drop", !!target && !target.node && target.group === this.groupIndex(h.getAttribute("data-group"))));
    };
    const up = (ev) => {
      window.removeEventListener("pointermove", move);
      window.removeEventListener("pointerup", up);
      const d = drag;
      drag = null;
      if (!d.moved) return;
      this.dragEnded = true; // the click that follows this press is no click on the node
      d.el.removeAttribute("transform");
      this.root.querySelectorAll(".wbg-drop").forEach((x) => x.classList.remove("wbg-drop"));
      const target = this.dropTarget(ev, d.id);
      if (target) this.dropInto(d.id, target);
    };
    this.nodeLayer.addEventListener("pointerdown", (ev) => {
      const g = ev.button === 0 && ev.target.closest && ev.target.closest(".wbg-node");
      const id = g && g.getAttribute("data-node-id");
      if (!id || this.data.readonly || id.startsWith("group:")) return;
      drag = { id, el: g, x: ev.clientX, y: ev.clientY, moved: false };
      window.addEventListener("pointermove", move);
      window.addEventListener("pointerup", up);
    });
    this.nodeLayer.addEventListener("click", (ev) => {
      if (this.dragEnded) ev.stopImmediatePropagation();
      this.dragEnded = false;
    }, true);
  }

  groupIndex(name) {
    return this.ann.groups.findIndex((g) => g[0] === name);
  }

  dropTarget(ev, dragged) {
    // what the pointer is over, in graph units: {node, group} (a drawn node other than the dragged one, or a
    // supernode: its group), {group} (inside an expanded group's outline), or null
    const r = this.svg.getBoundingClientRect(), { k, x, y } = this.t;
    const px = (ev.clientX - r.left - x) / k, py = (ev.clientY - r.top - y) / k;
    const inside = (x0, y0, x1, y1) => px >= x0 && px <= x1 && py >= y0 && py <= y1;
    const n = this.shown.nodes.find((m) => m.id !== dragged && inside(m.x - m.w / 2, m.y - m.h / 2, m.x + m.w / 2, m.y + m.h / 2));
    if (n) return { node: n.id, group: n.kind === "group" ? this.groupIndex(n.label) : this.groupOf(n.id) };
    const hull = (this.hullBoxes || []).find((b) => inside(b.x0, b.y0, b.x1, b.y1));
    return hull ? { group: this.groupIndex(hull.name) } : null;
  }

  dropInto(id, target) {
    // the dragged node joins the target's group (leaving its own; a group left with one member is undone), or the
    // two ungrouped nodes become a new group named by the name box (else "group N"); the node's group takes an
    // ungrouped target in
    const groups = this.ann.groups, from = this.groupOf(id);
    if (target.group >= 0 && target.group === from) return;
    if (target.group < 0 && from >= 0) groups[from].push(target.node);
    else if (target.group >= 0) groups[target.group].push(id);
    else groups.push([this.newGroupName(), target.node, id]);
    if (target.group >= 0 && from >= 0) groups[from].splice(groups[from].indexOf(id), 1);
    this.ann.groups = groups.filter((g) => g.length > 2);
    this.status.textContent = `${id} is in group "${this.ann.groups[this.groupOf(id)][0]}"`;
    this.commit();
  }

  newGroupName() {
    const typed = this.groupName.value.trim();
    this.groupName.value = "";
    if (typed && this.groupIndex(typed) < 0) return typed;
    let i = this.ann.groups.length + 1;
    while (this.groupIndex(`group ${i}`) >= 0) i += 1;
    return `group ${i}`;
  }

  update(raw, api) {
    // raw: the JSON bytes graph_view sends, {view, graph}; the graph is redrawn only when its key changes
    this.api = api;
    const t0 = performance.now();
    const { view, graph } = JSON.parse(new TextDecoder().decode(raw));
    const incoming = JSON.stringify(view.annotations || {});
    const sig = JSON.stringify([graph.key, view.height, view.readonly, view.panel]);
    this.echo = Math.max(this.echo, view.seq || 0); // the newest of our changes Python has applied
    this.seq = Math.max(this.seq, this.echo); // a view mounted anew numbers on from what Python holds
    const marksChanged = incoming !== this.seen && this.echo >= this.seq; // else: marks from before our change
    if (marksChanged) {
      this.seen = incoming;
      this.ann = { pinned: [], groups: [], notes: {}, ...JSON.parse(incoming) };
    }
    const settings = JSON.stringify(viewSettings(view.settings)); // the URL's link cap, pruning, collapsed groups
    const settingsChanged = settings !== this.seenView && this.echo >= this.seq;
    if (settingsChanged) this.seenView = settings;
    const picked = view.selected !== this.viewSelected; // the page's own selection (its details, a link, Back)
    this.viewSelected = view.selected;
    if (sig === this.sig) {
      if (picked && this.byId.has(view.selected)) this.select(view.selected, false);
      if (settingsChanged) {
        this.applyView(JSON.parse(settings)); // Back/Forward or an upload changed how the view was left
        this.reprune();
      } else if (marksChanged) this.remark(); // Back/Forward, a link or the view's own rerun changed only the marks
      return;
    }
    const key = JSON.stringify([graph.title, graph.size, graph.nodes.map((n) => n.id), graph.edges.s.length]);
    const fresh = key !== this.graphKey; // another graph, not another cut of the same one: fit it anew
    this.graphKey = key;
    this.sig = sig;
    this.root.classList.toggle("wbg-readonly", !!view.readonly); // a diff: nothing to pin, group or note
    this.root.classList.toggle("wbg-panel-below", view.panel === "below"); // the page's details sit beside
    this.data = { ...graph, edges: edgeRows(graph.edges), height: view.height, readonly: view.readonly };
    this.index();
    if ((fresh || picked) && view.selected && this.byId.has(view.selected)) this.selected = view.selected;
    if (fresh) this.controls();
    if (fresh || settingsChanged) this.applyView(JSON.parse(settings));
    this.kept = this.prune();
    this.render();
    if (fresh) this.fit();
    // how long this draw took in the browser, data in to the frame after it was painted (bench/app/app_bench.py)
    frame().then(() => this.root.setAttribute("data-draw-ms", (performance.now() - t0).toFixed(1)));
  }

  index() {
    const d = this.data;
    this.byId = new Map(d.nodes.map((n, i) => [n.id, i]));
    this.maxW = d.edges.reduce((m, e) => Math.max(m, Math.abs(e.w)), 1e-12);
  }

  controls() {
    // a new graph: the link cap, the pruning sliders (graphs with influence) and the check filter (checked graphs)
    const d = this.data;
    this.defaultCap = d.flow === "up" ? LINK_CAP : d.edges.length;
    this.hasInfluence = d.nodes.some((n) => n.influence !== null && n.influence !== undefined);
    this.pruneBox.style.display = this.hasInfluence ? "" : "none";
    this.hasCheck = d.nodes.some((n) => n.check) || d.edges.some((e) => e.check);
    this.failedInput.parentElement.style.display = this.hasCheck ? "" : "none";
    this.failedInput.checked = this.showFailed = true;
    this.legendRows();
  }

  legendRows() {
    // the link styles this graph uses: a plain link's sign, and each verdict of the check found in it (with counts)
    this.legend.replaceChildren();
    const d = this.data;
    if (d.counts) return; // a diff: its colours are named in its header
    const row = (word, colour, dash, text) => {
      const item = el("span", { class: "wbg-legend-item", "data-style": `${colour}|${dash.join(",")}`, "data-verdict": word }, this.legend);
      const svg = el("svg:svg", { width: 30, height: 10 }, item);
      el("svg:line", { x1: 1, x2: 29, y1: 5, y2: 5, stroke: colour, "stroke-width": 2.5, "stroke-dasharray": dash.join(" ") || "none" }, svg);
      item.append(` ${text}`);
    };
    row("positive", SIGN[1], [], "positive link");
    row("negative", SIGN[0], [], "negative link");
    const counts = new Map();
    for (const x of [...d.nodes, ...d.edges]) {
      const v = verdictOf(x.check);
      if (x.check) counts.set(v || "confirmed", (counts.get(v || "confirmed") || 0) + 1);
    }
    if (counts.has("confirmed")) el("span", { class: "wbg-legend-item", "data-verdict": "confirmed" }, this.legend, `confirmed by the check: plain style (${counts.get("confirmed")})`);
    for (const [word, v] of Object.entries(VERDICT)) if (counts.has(word)) row(word, v.colour, v.dash, `${v.label} (${counts.get(word)})`);
  }

  applyView(s) {
    // how the view was left (the URL's or a file's settings; null: the default) onto the controls
    this.linkCap = s.link_cap ?? this.defaultCap;
    this.capInput.value = String(this.linkCap);
    this.nodeT = this.hasInfluence ? s.node_threshold ?? 1 : 1;
    this.edgeT = this.hasInfluence ? s.edge_threshold ?? 1 : 1;
    for (const [input, v] of [[this.nodeTInput, this.nodeT], [this.edgeTInput, this.edgeT]]) {
      input.value = String(v);
      input.nextSibling.textContent = v.toFixed(2);
    }
    this.collapsed = new Set(s.collapsed.filter((c) => this.ann.groups.some((g) => g[0] === c)));
  }

  settings() {
    // the view's settings as Python keeps them (annotations.View): a default is null, so a plain link stays plain
    const t = (v) => (v < 1 ? v : null);
    return viewSettings({ link_cap: this.linkCap === this.defaultCap ? null : this.linkCap, node_threshold: t(this.nodeT), edge_threshold: t(this.edgeT), collapsed: [...this.collapsed] });
  }

  sendView() {
    if (this.data.readonly) return;
    this.seenView = JSON.stringify(this.settings());
    this.seq += 1;
    this.send(RESENDS);
  }

  // ---------------------------------------------------------------- pruning (circuit-tracer's prune_graph)

  prune() {
    // {nodes, edges}: 1 where kept. What the intervention check did not confirm (when hidden), then, below a threshold,
    // circuit-tracer's pruning on the drawn graph: the nodes covering nodeT of the influence (by the file's
    // cumulative influence), the edges covering edgeT of the edge influence among them, then features and
    // errors left without an outgoing edge (features also without an incoming one), until nothing changes
    const d = this.data, nodes = new Uint8Array(d.nodes.length).fill(1), edges = new Uint8Array(d.edges.length).fill(1);
    if (!this.showFailed) {
      d.nodes.forEach((n, i) => verdictOf(n.check) && (nodes[i] = 0));
      d.edges.forEach((e, j) => verdictOf(e.check) && (edges[j] = 0));
    }
    if (this.hasInfluence && this.nodeT < 1) {
      const ranked = d.nodes.map((n, i) => [n.influence, i]).filter(([v]) => v !== null && v !== undefined).sort((a, b) => a[0] - b[0]);
      ranked.forEach(([, i], r) => r > 0 && ranked[r - 1][0] >= this.nodeT && (nodes[i] = 0));
    }
    const live = (j) => edges[j] && nodes[d.edges[j].s] && nodes[d.edges[j].t];
    if (this.hasInfluence && this.edgeT < 1) this.pruneEdges(edges, live);
    const inner = (n) => n.kind !== "input" && n.kind !== "logits" && n.kind !== "embedding" && n.kind !== "logit";
    for (let changed = true; changed && this.hasInfluence && (this.nodeT < 1 || this.edgeT < 1);) {
      changed = false;
      const outs = new Uint8Array(d.nodes.length), ins = new Uint8Array(d.nodes.length);
      d.edges.forEach((e, j) => live(j) && ((outs[e.s] = 1), (ins[e.t] = 1)));
      d.nodes.forEach((n, i) => {
        if (nodes[i] && inner(n) && (!outs[i] || (n.kind === "feature" && !ins[i]))) [nodes[i], changed] = [0, true];
      });
    }
    // the marked nodes (pinned, grouped, noted, selected) are drawn whatever the pruning, with their links to drawn nodes
    const marked = new Set([...this.markedIds()].filter((id) => this.byId.has(id)).map((id) => this.byId.get(id)));
    marked.forEach((i) => (nodes[i] = 1));
    const near = (e) => (marked.has(e.s) || marked.has(e.t)) && nodes[e.s] && nodes[e.t];
    d.edges.forEach((e, j) => (edges[j] = live(j) || near(e) ? 1 : 0));
    return { nodes, edges };
  }

  markedIds() {
    // the ids the researcher marked: never pruned away, their links drawn at rest
    return new Set([...this.ann.pinned, ...this.ann.groups.flatMap((g) => g.slice(1)), ...Object.keys(this.ann.notes), ...(this.selected ? [this.selected] : [])]);
  }

  pruneEdges(edges, live) {
    // edge score = |w| / (the target's summed |w| in) x the target's influence on the logits (their
    // probabilities pushed back along the normalised adjacency); keep the top scores covering edgeT of the total
    const d = this.data, inSum = new Float64Array(d.nodes.length);
    d.edges.forEach((e, j) => live(j) && (inSum[e.t] += Math.abs(e.w)));
    const a = (e) => Math.abs(e.w) / (inSum[e.t] || 1e-10);
    const isLogit = (n) => n.kind === "logits" || n.kind === "logit";
    const weight = new Float64Array(d.nodes.length);
    let cur = Float64Array.from(d.nodes, (n) => (isLogit(n) ? n.prob ?? 1 : 0));
    for (let step = 0; step < 1000 && cur.some((v) => v > 0); step++) {
      const next = new Float64Array(d.nodes.length);
      d.edges.forEach((e, j) => live(j) && cur[e.t] && (next[e.s] += a(e) * cur[e.t]));
      next.forEach((v, i) => (weight[i] += v));
      cur = next;
    }
    d.nodes.forEach((n, i) => isLogit(n) && (weight[i] = n.prob ?? 1));
    const score = d.edges.map((e, j) => (live(j) ? a(e) * weight[e.t] : 0));
    const sorted = [...score].sort((x, y) => y - x), total = sorted.reduce((t, v) => t + v, 0) || 1;
    let acc = 0, cut = 0;
    for (const v of sorted) {
      acc += v;
      cut = v;
      if (acc / total >= this.edgeT) break;
    }
    score.forEach((v, j) => v < cut && (edges[j] = 0));
  }

  commit() {
    const t0 = this.clickAt ?? performance.now();
    this.clickAt = null;
    this.seen = JSON.stringify(this.ann);
    this.remark();
    this.seq += 1;
    this.send(RESENDS);
    // the click (or key) that changed the marks to the frame that shows them (bench/app/app_bench.py); a page-wide
    // list, not an attribute, because a rerun may remount the view and drop the root the attribute was on
    frame().then(() => (window.wbgMarkedMs = window.wbgMarkedMs || []).push(performance.now() - t0));
  }

  send(tries) {
    // the marks to Python, numbered; Python echoes the number it applied (view.seq). A change made while the page
    // was still running an earlier one can be dropped by Streamlit, so it is sent again (renumbered, so it counts
    // as a change) until it is echoed
    this.api.setStateValue("annotations", { ...this.ann, view: this.settings(), seq: this.seq });
    clearTimeout(this.resend);
    this.resend = setTimeout(() => {
      if (this.echo >= this.seq || tries <= 0) return;
      this.seq += 1;
      this.send(tries - 1);
    }, RESEND_MS);
  }

  remark() {
    // the marks changed: the pinned subgraph is another graph (redrawn); the full graph restyles its nodes
    const names = new Set(this.ann.groups.map((g) => g[0]));
    this.collapsed.forEach((c) => names.has(c) || this.collapsed.delete(c));
    this.picked.forEach((p) => (this.ann.pinned.includes(p) && this.groupOf(p) < 0) || this.picked.delete(p));
    this.groupBtn.textContent = `group selected pins (${this.picked.size})`;
    if (this.pruned()) this.kept = this.prune(); // a mark made or undone under pruning: drawn, or pruned again
    if (this.subgraph || this.collapsed.size || this.pruned()) return this.render();
    this.nodeEls.forEach((g, id) => this.markNode(g, this.nodeById.get(id)));
    this.hulls();
    this.groupButtons();
    this.focus(false);
    this.header(this.shown);
    this.details(this.selected);
    this.placeLabels();
    this.schedule(false);
  }

  pruned() {
    // whether anything is pruned in the browser (then a change of the marks changes what is drawn)
    return (this.hasInfluence && (this.nodeT < 1 || this.edgeT < 1)) || (this.hasCheck && !this.showFailed);
  }

  groupOf(id) {
    return this.ann.groups.findIndex((g) => g.slice(1).includes(id));
  }

  // ---------------------------------------------------------------- what is drawn

  visible() {
    // the kept nodes and edges (prune), or (pinned subgraph) the pinned ones; a group folded into one supernode
    // (always in the subgraph, when collapsed in the full graph) keeps its members' edges, summed per neighbour
    const d = this.data, ok = this.kept;
    const pinned = new Set(this.ann.pinned);
    const show = (i) => ok.nodes[i] && (!this.subgraph || pinned.has(d.nodes[i].id));
    const rep = new Map(), supers = new Map(), nodes = [];
    d.nodes.forEach((n, i) => {
      if (!show(i)) return;
      const g = this.groupOf(n.id);
      if (g >= 0 && (this.subgraph || this.collapsed.has(this.ann.groups[g][0]))) {
        if (!supers.has(g)) supers.set(g, nodes.push(this.superNode(g, show)) - 1);
        rep.set(i, supers.get(g));
      } else rep.set(i, nodes.push({ ...n, i }) - 1);
    });
    const merged = new Map(), edges = [];
    d.edges.forEach((e, j) => {
      const s = rep.get(e.s), t = rep.get(e.t);
      if (!ok.edges[j] || s === undefined || t === undefined || s === t) return;
      if (nodes[s].kind !== "group" && nodes[t].kind !== "group") return edges.push({ ...e, s, t, j, local: true });
      const k = `${s}|${t}`;
      if (!merged.has(k)) merged.set(k, edges[edges.push({ ...e, w: 0, s, t, port: null, j: -1, local: true, heads: null, check: null, qk: null, parts: 0 }) - 1]);
      const m = merged.get(k);
      m.w += e.w;
      m.parts += 1;
    });
    for (const m of merged.values()) m.p = this.endpoints(nodes[m.s], nodes[m.t], null);
    return { nodes, edges };
  }

  superNode(g, show) {
    // a group as one node at its shown members' centre, as wide as the members' span
    const d = this.data, name = this.ann.groups[g][0];
    const members = this.ann.groups[g].slice(1).filter((m) => this.byId.has(m) && show(this.byId.get(m))).map((m) => d.nodes[this.byId.get(m)]);
    const x = members.reduce((s, m) => s + m.x, 0) / members.length;
    const y = members.reduce((s, m) => s + m.y, 0) / members.length;
    const w = Math.max(60, Math.min(160, name.length * 7 + 16));
    return { id: `group:${name}`, label: name, kind: "group", x, y, w, h: d.flow === "up" ? 24 : 40, ports: [], members: members.map((m) => m.id), strength: 0, i: -1 };
  }

  endpoints(a, b, port) {
    // as layout.ends: writer's right side to the reader's port, or (upward graph) writer's top to reader's bottom
    if (this.data.flow === "up") return [a.x, a.y - a.h / 2, b.x, b.y + b.h / 2];
    const i = port && b.ports.includes(port) ? b.ports.indexOf(port) - 1 : null;
    return [a.x + a.w / 2, a.y, b.x - b.w / 2, i === null ? b.y : b.y + (i * b.h) / 3];
  }

  ends(e) {
    // the ids of an edge's two nodes (a subgraph's edges index the shown nodes, others the data's)
    const list = e.local ? this.shown.nodes : this.data.nodes;
    return [list[e.s].id, list[e.t].id];
  }

  render() {
    const d = this.data;
    const v = this.visible();
    this.shown = v;
    this.nodeById = new Map(v.nodes.map((n) => [n.id, n]));
    this.touching = new Map(v.nodes.map((n) => [n.id, []]));
    v.edges.forEach((e, j) => this.ends(e).forEach((id) => this.touching.get(id).push(j)));
    const colour = (e) => (d.counts ? DIFF[e.status] : SIGN[e.w >= 0 ? 1 : 0]);
    const step = (e) => Math.round(STEPS * Math.min(1, Math.abs(e.w) / this.maxW));
    const style = (e) => {
      const c = VERDICT[verdictOf(e.check)];
      return c ? [c.colour, step(e), c.dash.join(",")] : [colour(e), step(e), ""];
    };
    this.edges.set(v.edges, style, d.flow === "up");
    this.order = v.edges.map((_, j) => j).sort((a, b) => Math.abs(v.edges[b].w) - Math.abs(v.edges[a].w));
    this.focus(false);
    this.hovered = null;
    const cols = el("svg:g", { class: "wbg-cols" });
    for (const c of d.columns) el("svg:line", { x1: c.x, x2: c.x, y1: 20, y2: d.size[1], class: "wbg-col" }, cols);
    const nodes = document.createDocumentFragment();
    this.nodeEls = new Map(v.nodes.map((n) => [n.id, this.drawNode(nodes, n)]));
    this.nodeLayer.replaceChildren(nodes);
    this.vp.replaceChildren(cols, this.hullLayer, this.nodeLayer);
    this.hulls();
    this.root.setAttribute("data-edges", String(v.edges.length));
    this.groupButtons();
    this.header(v);
    this.transform();
    this.details(this.selected);
    this.root.setAttribute("data-drawn", String(Date.now()));
  }

  focus(redraw = true) {
    // the links drawn at rest: the strongest linkCap, and those of the selected and the pinned nodes (a hovered
    // node's are lit on hover); the rest stay on the canvas's list, found again by a hover
    const base = new Set(this.order.slice(0, this.linkCap));
    for (const id of this.markedIds()) {
      const near = this.touching.get(id) || [];
      for (const j of near.length > FOCUS_EDGES ? this.strongest(near).slice(0, FOCUS_EDGES) : near) base.add(j);
    }
    this.edges.base = base;
    this.root.setAttribute("data-links-drawn", String(base.size));
    if (!redraw) return;
    this.stats_();
    this.schedule(false);
  }

  strongest(list) {
    const e = this.shown.edges;
    return [...list].sort((a, b) => Math.abs(e[b].w) - Math.abs(e[a].w));
  }

  groupButtons() {
    // one toggle per group: collapse it into a supernode (its edges kept, summed) or expand it into its members
    this.groupBar.replaceChildren();
    if (this.data.readonly || this.subgraph) return;
    this.ann.groups.forEach(([name]) => {
      const folded = this.collapsed.has(name);
      const b = el("button", { class: "wbg-fold", "data-group": name }, this.groupBar, `${folded ? "expand" : "collapse"} ${name}`);
      b.onclick = () => this.fold(name, !folded);
    });
  }

  fold(name, collapse) {
    if (collapse) this.collapsed.add(name);
    else this.collapsed.delete(name);
    if (this.selected && this.selected.startsWith("group:") && !collapse) this.selected = null;
    this.render();
    this.sendView();
  }

  drawNode(parent, n) {
    const g = el("svg:g", { class: `wbg-node wbg-k-${n.kind} wbg-s-${n.status || "both"}`, "data-node-id": n.id }, parent);
    const fill = n.kind === "group" ? "#ffffff" : COLOUR[n.kind] || "#4e79a7";
    el("svg:rect", { x: n.x - n.w / 2, y: n.y - n.h / 2, width: n.w, height: n.h, rx: 6, fill, class: "wbg-box" }, g);
    n.ports.forEach((p, i) => {
      const py = n.y + ((i - 1) * n.h) / 3;
      el("svg:circle", { cx: n.x - n.w / 2, cy: py, r: 3.2, class: "wbg-port" }, g);
      el("svg:text", { x: n.x - n.w / 2 + 6, y: py + 3, class: "wbg-port-label" }, g, p);
    });
    el("svg:circle", { cx: n.x + n.w / 2 - 5, cy: n.y - n.h / 2 + 5, r: 4, class: "wbg-pin" }, g);
    this.markNode(g, n);
    return g;
  }

  markNode(g, n) {
    // pins, group colour and selection on one drawn node (no redraw)
    const gi = n.kind === "group" ? -1 : this.groupOf(n.id);
    const stroke = gi >= 0 ? GROUP_COLOURS[gi % GROUP_COLOURS.length] : this.data.counts ? DIFF[n.status] : "#333";
    g.firstChild.setAttribute("stroke", stroke);
    g.classList.toggle("wbg-pinned", this.ann.pinned.includes(n.id));
    g.classList.toggle("wbg-super", !!(n.members && n.members.length));
    g.classList.toggle("wbg-selected", n.id === this.selected);
    g.classList.toggle("wbg-picked", this.picked.has(n.id));
    const v = VERDICT[verdictOf(n.check)];
    g.classList.toggle("wbg-unconfirmed", !!v);
    if (v) {
      g.firstChild.setAttribute("stroke-dasharray", v.dash.join(" "));
      if (gi < 0) g.firstChild.setAttribute("stroke", v.colour);
    }
  }

  hulls() {
    // an outline around each expanded group's drawn members, in the group's colour (named by placeLabels)
    const box = document.createDocumentFragment();
    this.hullBoxes = [];
    this.ann.groups.forEach(([name, ...ms], gi) => {
      const ns = ms.map((m) => this.nodeById.get(m)).filter((n) => n && n.kind !== "group");
      if (!ns.length || this.subgraph || this.collapsed.has(name)) return;
      const pad = 6, x0 = Math.min(...ns.map((n) => n.x - n.w / 2)) - pad, y0 = Math.min(...ns.map((n) => n.y - n.h / 2)) - pad;
      const x1 = Math.max(...ns.map((n) => n.x + n.w / 2)) + pad, y1 = Math.max(...ns.map((n) => n.y + n.h / 2)) + pad;
      const colour = GROUP_COLOURS[gi % GROUP_COLOURS.length];
      const g = el("svg:g", { class: "wbg-hull", "data-group": name }, box);
      el("svg:rect", { x: x0, y: y0, width: x1 - x0, height: y1 - y0, rx: 8, stroke: colour, fill: colour, "fill-opacity": 0.06 }, g);
      this.hullBoxes.push({ name, colour, x0, y0, x1, y1 });
    });
    this.hullLayer.replaceChildren(box);
  }

  header(v) {
    const d = this.data;
    this.head.replaceChildren();
    el("div", { class: "wbg-title" }, this.head, d.title || "");
    if (d.shown) el("div", { class: "wbg-shown", "data-testid": "graph-shown" }, this.head, d.shown);
    if (d.counts) {
      const c = d.counts, [a, b] = d.names || ["A", "B"];
      el("div", { class: "wbg-diff" }, this.head,
        `edges: ${c.edges_both} in both, ${c.edges_a} only in ${a} (blue), ${c.edges_b} only in ${b} (orange) · ` +
        `nodes: ${c.nodes_both} in both, ${c.nodes_a} only in ${a}, ${c.nodes_b} only in ${b}`);
    }
    const hidden = [...(d.hidden || [])];
    if (this.subgraph) {
      hidden.push(`pinned subgraph: ${d.nodes.length - v.nodes.reduce((s, n) => s + (n.members ? n.members.length : 1), 0)} unpinned nodes and ` +
        `${d.edges.length - v.edges.length} edges not shown (edges into one group are summed)`);
    }
    if (hidden.length) el("div", { class: "wbg-hidden", "data-testid": "graph-hidden" }, this.head, "not drawn: " + hidden.join("; "));
    this.subBtn.textContent = this.subgraph ? "full graph" : `pinned subgraph (${this.ann.pinned.length})`;
    this.stats_();
  }

  stats_() {
    // what the link cap, the pruning and the check filter leave out, in numbers (no filter hides silently)
    const d = this.data, v = this.shown, k = this.kept, parts = [];
    const cap = Math.min(this.linkCap, v.edges.length);
    parts.push(`links drawn: ${this.edges.base.size} of ${v.edges.length} (the ${cap} strongest, and those of the selected and pinned nodes; hover a node for its own)`);
    const lostN = k.nodes.reduce((t, x) => t + (1 - x), 0), lostE = k.edges.reduce((t, x) => t + (1 - x), 0);
    if (this.hasInfluence && (this.nodeT < 1 || this.edgeT < 1)) {
      parts.push(`influence pruning (node ${this.nodeT.toFixed(2)}, edge ${this.edgeT.toFixed(2)}) hides ${lostN} of ${d.nodes.length} nodes and ${lostE} of ${d.edges.length} links`);
    }
    if (this.hasCheck) {
      const count = (xs) => [xs.filter((x) => verdictOf(x.check)).length, xs.filter((x) => x.check).length];
      const [fn, cn] = count(d.nodes), [fe, ce] = count(d.edges);
      parts.push(`intervention check: ${fn} of ${cn} checked nodes and ${fe} of ${ce} checked links not confirmed (dashed, by verdict: see the legend)${this.showFailed ? "" : ", hidden"}`);
    }
    this.stats.textContent = parts.join(" · ");
  }

  // ---------------------------------------------------------------- zoom, labels

  measure() {
    const r = this.stage.getBoundingClientRect();
    if (r.width && r.height) this.size = { w: r.width, h: r.height };
    this.schedule(true);
  }

  fit() {
    // the whole graph in the stage's width; an upward graph of a long prompt, or the layer columns of a deep
    // model (too wide for that at a readable zoom), at a readable zoom instead, panned to its end: the logits
    const [w, h] = this.data.size, most = this.data.height || 560;
    const width = this.stage.getBoundingClientRect().width || 800; // the one forced layout of a draw
    let k = Math.min(width / w, (most - 30) / h, 2.5); // the whole graph, when its nodes stay readable so
    if (k < (this.data.flow === "up" ? MIN_FIT : MIN_FIT_WIDE)) k = Math.min(READABLE, (most - 30) / h);
    const tall = Math.max(220, Math.min(most, h * k + 30));
    this.root.style.setProperty("--wbg-height", `${tall}px`);
    this.size = { w: width, h: tall }; // the stage is as tall as the height just set (no second layout)
    k = Math.min(k, tall / h);
    this.t = { k, x: w * k > width ? width - w * k : (width - w * k) / 2, y: 4 };
    this.transform();
  }

  transform() {
    this.vp.setAttribute("transform", `translate(${this.t.x},${this.t.y}) scale(${this.t.k})`);
    this.root.classList.toggle("wbg-far", this.t.k < 0.7);
    this.schedule(true);
  }

  schedule(labels) {
    // the canvas (and, after a move, the labels) redrawn once in the next frame however many changes came
    this.needLabels = this.needLabels || labels;
    if (this.pending || !this.shown) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.edges.draw(this.t, this.size.w, this.size.h);
      if (this.needLabels) this.placeLabels();
      this.needLabels = false;
    });
  }

  placeLabels() {
    // strongest (pinned and selected first) get a label where it fits; the rest wait for a closer zoom
    const { k, x: tx, y: ty } = this.t;
    const { w: width, h: height } = this.size;
    const order = [...this.shown.nodes].sort((a, b) => this.rank(b) - this.rank(a));
    const boxes = [];
    const labels = document.createDocumentFragment();
    let right = -Infinity; // column labels left to right, each only where it clears the previous one
    for (const c of this.data.columns) {
      const x = c.x * k + tx, half = c.label.length * 3.4;
      if (x - half < right) continue;
      el("svg:text", { x, y: 12, class: "wbg-col-label" }, labels, c.label);
      right = x + half + 6;
    }
    for (const r of this.data.rows || []) { // an upward graph's layer rows, labelled at the left edge
      el("svg:text", { x: 4, y: r.y * k + ty + 4, class: "wbg-row-label" }, labels, r.label);
    }
    // a label sits inside its node when it fits there, else above it if that covers no node or label
    const screen = (n) => [(n.x - n.w / 2) * k + tx, (n.y - n.h / 2) * k + ty, (n.x + n.w / 2) * k + tx, (n.y + n.h / 2) * k + ty];
    const nodeBoxes = this.shown.nodes.map(screen).filter((b) => b[2] >= 0 && b[0] <= width && b[3] >= 0 && b[1] <= height);
    for (const { name, colour, x0, y0 } of this.hullBoxes || []) { // a group's name at its outline's top left, first
      const x = x0 * k + tx + 2, y = y0 * k + ty - 3;
      el("svg:text", { x, y, fill: colour, class: "wbg-hull-label" }, labels, name);
      boxes.push([x, y - 11, x + name.length * 6.6, y + 2]);
    }
    let shown = 0;
    for (const n of order) {
      const text = n.label || n.id;
      const w = text.length * 6.6 + 4, h = 13;
      const [x0, y0, x1, y1] = screen(n);
      const cx = (x0 + x1) / 2;
      if (x1 < 0 || x0 > width || y1 < 0 || y0 > height) continue;
      if (x1 - x0 >= w && y1 - y0 >= h) {
        el("svg:text", { x: cx, y: (y0 + y1) / 2 + 4, class: "wbg-label" }, labels, text);
        shown += 1;
        continue;
      }
      const spot = this.labelSpot(text, [x0, y0, x1, y1], width, [...boxes, ...nodeBoxes]);
      if (!spot) continue;
      boxes.push(spot.box);
      el("svg:text", { x: spot.x, y: spot.y, class: "wbg-label" }, labels, spot.text);
      shown += 1;
    }
    this.labels.replaceChildren(labels);
    this.status.textContent = `labels: ${shown} of ${this.shown.nodes.length} (zoom in for more) · zoom ${this.t.k.toFixed(2)}`;
  }

  labelSpot(text, [x0, y0, x1, y1], width, taken) {
    // the first free place for a node's label: its text, then a short form, above the node, then below it; kept
    // inside the stage's width (never clipped at an edge); null when every place covers a node or a label
    const short = text.length > 14 ? `${text.slice(0, 12)}…` : null;
    const cx = (x0 + x1) / 2, h = 13;
    for (const t of short ? [text, short] : [text]) {
      const w = t.length * 6.6 + 4;
      if (w > width) continue;
      const x = Math.min(Math.max(cx, w / 2 + 1), width - w / 2 - 1);
      for (const [top, y] of [[y0 - h - 2, y0 - 4], [y1 + 1, y1 + h - 2]]) {
        const box = [x - w / 2, top, x + w / 2, top + h + 1];
        if (!taken.some((b) => box[0] < b[2] && b[0] < box[2] && box[1] < b[3] && b[1] < box[3])) return { x, y, text: t, box };
      }
    }
    return null;
  }

  rank(n) {
    return (this.ann.pinned.includes(n.id) ? 1e9 : 0) + (n.id === this.selected ? 2e9 : 0) + (n.members ? 5e8 : 0) + n.strength;
  }

  // ---------------------------------------------------------------- hover, details

  name(n) {
    // a node as a researcher reads it: its label and the token it sits on, its id only where it has no label
    if (n.kind === "group") return `group "${n.label}"`;
    const base = n.label && n.label !== n.id ? n.label : n.id;
    return n.token ? `${base} @ "${n.token}"` : base;
  }

  lines(e, dir) {
    // one link of a shown node (e: a shown edge): the node at its other end, by name, and its weight
    const other = this.shown.nodes[dir === "in" ? e.s : e.t];
    const via = e.heads && e.heads.length ? ` via ${e.heads.slice(0, 2).map(([h, w]) => `${h} ${fmt(w)}`).join(", ")}` : "";
    const failed = verdictOf(e.check) ? ` ✗ check: ${e.check}` : "";
    return `${dir === "in" ? "from" : "to"} ${this.name(other)}${dir === "in" ? portName(e) : ""}: ${fmt(e.w)}${via}${failed}`;
  }

  links(id, dir) {
    // the shown links into (in) or out of (out) a shown node, strongest first
    const e = this.shown.edges, at = this.shown.nodes.findIndex((n) => n.id === id);
    return this.strongest((this.touching.get(id) || []).filter((j) => (dir === "in" ? e[j].t : e[j].s) === at)).map((j) => e[j]);
  }

  nodeFacts(n) {
    // the first line names the node as the links do (label and token); the second, in small text, its id
    const title = this.name(n), facts = [n.members ? title : `${title} · ${n.kind}`, title === n.id ? "" : `id ${n.id}`];
    if (n.members) return [...facts, `group of ${n.members.map((m) => this.name(this.data.nodes[this.byId.get(m)])).join(", ")}`];
    if (n.check) facts.push(`intervention check: ${n.check}`);
    facts.push(`layer ${n.layer ?? "-"} · position ${n.pos ?? "-"} · score ${fmt(n.score)} · activation ${fmt(n.activation)}`);
    facts.push(`sum |weight| of drawn edges ${fmt(n.strength)}`);
    if (n.status && this.data.counts) facts.push(`in ${n.status === "both" ? "both circuits" : "only " + this.data.names[n.status === "a" ? 0 : 1]}`);
    return facts;
  }

  tipNode(n, ev) {
    const lines = this.nodeFacts(n);
    const ins = this.links(n.id, "in").slice(0, 3), outs = this.links(n.id, "out").slice(0, 3);
    if (ins.length) lines.push("strongest in: " + ins.map((e) => this.lines(e, "in")).join("; "));
    if (outs.length) lines.push("strongest out: " + outs.map((e) => this.lines(e, "out")).join("; "));
    if (this.ann.notes[n.id]) lines.push(`note: ${this.ann.notes[n.id]}`);
    this.hovered = n;
    this.showTip(lines, ev, 1);
    this.highlight(n);
  }

  hoverEdge(ev) {
    // over empty space: the nearest edge within a few px gets the tip (nodes have their own listeners)
    if (ev.target.closest && ev.target.closest(".wbg-node")) return;
    const e = this.edgeAt(ev);
    if (!e) return this.hideTip();
    this.hovered = null;
    this.tipEdge(e, ev);
  }

  edgeAt(ev) {
    // the shown edge within a few screen px of the pointer (null: none)
    const r = this.svg.getBoundingClientRect(), { k, x, y } = this.t;
    const j = this.edges.hit((ev.clientX - r.left - x) / k, (ev.clientY - r.top - y) / k, HIT_PX / k);
    return j < 0 ? null : this.shown.edges[j];
  }

  tipEdge(e, ev) {
    const d = this.data;
    const [a, b] = [this.shown.nodes[e.s], this.shown.nodes[e.t]].map((n) => this.name(n));
    const lines = [`${a} → ${b}${portName(e)}`, `weight ${fmt(e.w)}` + (e.parts ? ` (the sum of ${e.parts} links)` : "")];
    if (e.heads && e.heads.length) lines.push("carried by " + e.heads.map(([h, w]) => `${h} ${fmt(w)}`).join(", "));
    if (e.check) lines.push(`intervention check: ${e.check}`);
    if (e.qk) lines.push(`click: why ${e.qk.map((q) => q.head).join(", ")} looked there (QK)`);
    if (d.counts) lines.push(e.status === "both" ? `${d.names[0]} ${fmt(e.w)} / ${d.names[1]} ${fmt(e.wb)}` : `only in ${d.names[e.status === "a" ? 0 : 1]}`);
    this.showTip(lines, ev);
  }

  showTip(lines, ev, idLine = -1) {
    // line idLine (a node's id) in small text; an empty line is left out
    const rows = lines.map((t, i) => t && el("div", i === idLine ? { class: "wbg-id" } : {}, null, t));
    this.tip.replaceChildren(...rows.filter(Boolean));
    this.tip.style.display = "block";
    this.moveTip(ev);
  }

  moveTip(ev) {
    const r = this.root.getBoundingClientRect();
    this.tip.style.left = `${ev.clientX - r.left + 14}px`;
    this.tip.style.top = `${ev.clientY - r.top + 14}px`;
  }

  hideTip() {
    if (this.tip.style.display === "none" && !this.hovered) return;
    this.tip.style.display = "none";
    this.hovered = null;
    this.highlight(null);
  }

  highlight(n) {
    const lit = n ? new Set(this.touching.get(n.id) || []) : null;
    if (!lit && !this.edges.lit) return;
    this.edges.lit = lit;
    this.schedule(false);
  }

  select(id, send) {
    const hidden = id !== null && !this.nodeById.has(id) && this.byId.has(id);
    this.selected = id;
    this.link = null; // a node selected: its panel, not a link's
    if (hidden) this.reprune(); // a pruned node selected (the page's selection, a link): drawn with its links
    this.nodeEls.forEach((g, nid) => g.classList.toggle("wbg-selected", nid === id));
    this.focus();
    this.details(id);
    this.placeLabels();
    if (send && !id.startsWith("group:")) this.api.setTriggerValue("clicked", id);
  }

  details(id) {
    // rebuilt on every change of the marks or the selection; a note being typed on the same node is kept
    const p = this.panel, old = p.querySelector(".wbg-note");
    const typed = old && p.dataset.node === String(id) && old.value !== (this.ann.notes[id] || "") ? old.value : null;
    p.dataset.node = String(id);
    p.replaceChildren();
    if (this.link && this.linkDetails(p)) return;
    const n = id === null ? null : this.nodeById.get(id) || (this.byId.has(id) ? { ...this.data.nodes[this.byId.get(id)], i: this.byId.get(id) } : null);
    if (!n) return el("div", { class: "wbg-empty" }, p, "click a node for its details; shift-click pins it");
    this.nodeFacts(n).forEach((t, i) => t && el(i ? "div" : "h4", i === 1 ? { class: "wbg-id" } : {}, p, t));
    if (n.members) {
      const g = this.ann.groups.findIndex((x) => `group:${x[0]}` === id);
      if (!this.subgraph) el("button", { class: "wbg-expand" }, p, "expand").onclick = () => this.fold(n.label, false);
      el("button", { class: "wbg-ungroup" }, p, "ungroup").onclick = () => {
        this.ann.groups.splice(g, 1);
        this.commit();
      };
    } else {
      const pinned = this.ann.pinned.includes(id);
      el("button", { class: "wbg-pin-btn" }, p, pinned ? "unpin" : "pin").onclick = () => this.togglePin(id);
      const gi = this.groupOf(id);
      if (gi >= 0) el("div", { class: "wbg-in-group" }, p, `in group "${this.ann.groups[gi][0]}"`);
      else el("button", { class: "wbg-pick-btn" }, p, this.picked.has(id) ? "deselect from group" : "select for group").onclick = () => this.togglePick(id);
    }
    for (const dir of ["in", "out"]) {
      const list = this.links(id, dir);
      el("div", { class: "wbg-sub-h" }, p, `strongest ${dir === "in" ? "incoming" : "outgoing"} (${list.length})`);
      for (const e of list.slice(0, TOP)) {
        const to = this.shown.nodes[dir === "in" ? e.s : e.t].id;
        el("div", { class: "wbg-link" }, p, this.lines(e, dir)).onclick = () => this.select(to, true);
        if (e.qk) el("button", { class: "wbg-why", "data-testid": "graph-why" }, p, `why ${e.qk.map((q) => q.head).join(", ")} looked there`).onclick = () => this.selectLink(e);
      }
      if (list.length > TOP) el("div", { class: "wbg-more" }, p, `${list.length - TOP} weaker not listed`);
    }
    if (n.members) return;
    el("div", { class: "wbg-sub-h" }, p, "note");
    const area = el("textarea", { class: "wbg-note", rows: 3 }, p);
    area.value = typed ?? (this.ann.notes[id] || "");
    el("button", { class: "wbg-save-note" }, p, "save note").onclick = () => {
      if (area.value.trim()) this.ann.notes[id] = area.value;
      else delete this.ann.notes[id];
      this.commit();
    };
  }

  selectLink(e) {
    // a link clicked on the stage (or its "why" in a node's list): the panel shows it until a node is selected
    this.link = [this.shown.nodes[e.s].id, this.shown.nodes[e.t].id];
    this.details(this.selected);
  }

  linkDetails(p) {
    // the selected link (false: no longer shown): its weight, heads and check, and for each head carrying it why
    // that head looked there (a graph built with --qk): the attention entry and its query- and key-side sources
    const [a, b] = this.link, nodes = this.shown.nodes;
    const e = this.shown.edges.find((x) => nodes[x.s].id === a && nodes[x.t].id === b);
    if (!e) return (this.link = null), false;
    el("h4", {}, p, `${this.name(nodes[e.s])} → ${this.name(nodes[e.t])}${portName(e)}`);
    el("div", {}, p, `link weight ${fmt(e.w)}` + (e.check ? ` · intervention check: ${e.check}` : ""));
    if (e.heads && e.heads.length) el("div", {}, p, "carried by " + e.heads.map(([h, w]) => `${h} ${fmt(w)}`).join(", "));
    if (!e.qk) el("div", { class: "wbg-empty" }, p, "no QK attribution on this link (graphs built with --qk have it for links through heads)");
    for (const q of e.qk || []) {
      const box = el("div", { class: "wbg-qk", "data-testid": "graph-qk", "data-head": q.head }, p);
      el("div", { class: "wbg-sub-h" }, box, `why ${q.head} looked there: query position ${q.query} "${q.query_token}", key position ${q.key} "${q.key_token}" (score ${fmt(q.score)})`);
      for (const side of ["query", "key"]) {
        const list = q[`${side}_sources`];
        el("div", { class: "wbg-qk-side" }, box, `${side} side: ${list.length ? "the largest parts of the score" : "no source"}`);
        for (const [name, part, word] of list.slice(0, TOP)) {
          el("div", { class: "wbg-qk-src", "data-side": side }, box, `${name}: ${fmt(part)}` + (word ? ` · check: ${word}` : ""));
        }
        if (list.length > TOP) el("div", { class: "wbg-more" }, box, `${list.length - TOP} smaller not listed`);
      }
    }
    el("button", { class: "wbg-link-back" }, p, this.selected === null ? "close" : "back to the node").onclick = () => {
      this.link = null;
      this.details(this.selected);
    };
    return true;
  }

  togglePin(id) {
    if (this.data.readonly) return;
    const at = this.ann.pinned.indexOf(id);
    if (at >= 0) this.ann.pinned.splice(at, 1);
    else this.ann.pinned.push(id);
    this.commit();
  }

  togglePick(id) {
    // select a node for the next group (pinning it), or take it out of the selection
    if (this.data.readonly || id.startsWith("group:")) return;
    if (this.groupOf(id) >= 0) {
      this.status.textContent = `${id} is already in group "${this.ann.groups[this.groupOf(id)][0]}"`;
      return;
    }
    if (this.picked.has(id)) this.picked.delete(id);
    else this.picked.add(id);
    if (!this.ann.pinned.includes(id)) return this.togglePin(id); // commit restyles it
    this.remark();
  }

  group() {
    // the pins selected for it (togglePick), never every pin: a group is what the researcher chose
    const free = this.ann.pinned.filter((p) => this.picked.has(p) && this.groupOf(p) < 0 && this.byId.has(p));
    const name = this.groupName.value.trim() || `group ${this.ann.groups.length + 1}`;
    if (free.length < 2 || this.ann.groups.some((g) => g[0] === name)) {
      this.status.textContent = free.length < 2 ? "select two or more pinned, ungrouped nodes to group (ctrl-click, or \"select for group\" in a node's details)" : `a group is already named "${name}"`;
      return;
    }
    this.ann.groups.push([name, ...free]);
    this.groupName.value = "";
    this.picked.clear();
    this.commit();
  }
}

export default function (component) {
  const { data, parentElement, setStateValue, setTriggerValue } = component;
  let app = APPS.get(parentElement);
  if (!app) {
    app = new GraphApp(parentElement, { setStateValue, setTriggerValue });
    APPS.set(parentElement, app);
  }
  app.update(data, { setStateValue, setTriggerValue });
}
