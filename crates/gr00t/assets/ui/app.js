// gr00t-rs status page: polls /ui/requests for new entries and draws each request's frames,
// timing and action chunk; the demo button posts /demo's request to /predict. No libraries.
"use strict";

const POLL_MS = 1000;
const JOINT_COLORS = ["#3056d3", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0c8599", "#868e96"];
const STAGES = [
  ["queue", "#adb5bd"], ["decode", "#74c0fc"], ["encode", "#4dabf7"], ["vision", "#f59f00"],
  ["llm", "#e8590c"], ["adapter", "#d6336c"], ["denoise", "#7048e8"], ["decode_actions", "#2b8a3e"],
];
const $ = (sel, root = document) => root.querySelector(sel);

let latest = 0;
let capacity = 20;
let info = null;

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "style") e.style.cssText = v; else if (k in e) e[k] = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

const fmtMs = (ms) => (ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms.toFixed(2)) + " ms";
const short = (s, n = 8) => (s && s.length > n ? s.slice(0, n) + "…" : s || "");

// ---- plotting ----------------------------------------------------------------------------

/** A figure with a HiDPI canvas; returns [figure, 2d context, width, height]. */
function figure(w, h, caption) {
  const dpr = window.devicePixelRatio || 1;
  const c = el("canvas", { width: Math.round(w * dpr), height: Math.round(h * dpr) });
  c.style.width = w + "px";
  c.style.height = h + "px";
  const ctx = c.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.font = "10px system-ui, sans-serif";
  return [el("figure", { style: `width:${w}px` }, c, el("figcaption", {}, caption)), ctx, w, h];
}

function range(values) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) if (Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  if (!Number.isFinite(lo)) return [0, 1];
  const pad = Math.max((hi - lo) * 0.08, 1e-3);
  return [lo - pad, hi + pad];
}

function ticks(lo, hi, n = 4) {
  const step = (hi - lo) / n;
  return Array.from({ length: n + 1 }, (_, i) => lo + i * step);
}

const tickText = (v) => (Math.abs(v) >= 10 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toFixed(1) : v.toFixed(2));

/**
 * Lines over the horizon: x = step (0 = "now", 1..H = the chunk). Each series is
 * {ys, color, dash, now}; `now` (the current value) is drawn as a dot at x = 0.
 */
function lines(ctx, w, h, series, yRange) {
  const L = 38, R = 8, T = 8, B = 18;
  const H = Math.max(...series.map((s) => s.ys.length), 1);
  const [lo, hi] = yRange || range(series.flatMap((s) => s.ys.concat(s.now ?? [])));
  const X = (i) => L + (i / H) * (w - L - R);
  const Y = (v) => T + (1 - (v - lo) / (hi - lo)) * (h - T - B);
  ctx.strokeStyle = "#e3e6eb";
  ctx.fillStyle = "#6b7280";
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const v of ticks(lo, hi)) {
    ctx.beginPath(); ctx.moveTo(L, Y(v)); ctx.lineTo(w - R, Y(v)); ctx.stroke();
    ctx.fillText(tickText(v), L - 4, Y(v));
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  for (const i of [0, 10, 20, 30, H]) if (i <= H) ctx.fillText(i === 0 ? "now" : String(i), X(i), h - B + 4);
  ctx.strokeStyle = "#c3c8d0";
  ctx.beginPath(); ctx.moveTo(X(0), T); ctx.lineTo(X(0), h - B); ctx.stroke();
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.lineWidth = s.width || 1.6;
    ctx.setLineDash(s.dash ? [4, 3] : []);
    ctx.beginPath();
    if (s.now != null) ctx.moveTo(X(0), Y(s.now)); else ctx.moveTo(X(1), Y(s.ys[0]));
    s.ys.forEach((v, i) => ctx.lineTo(X(i + 1), Y(v)));
    ctx.stroke();
    ctx.setLineDash([]);
    if (s.now != null) {
      ctx.fillStyle = s.color;
      ctx.beginPath(); ctx.arc(X(0), Y(s.now), 3.2, 0, 2 * Math.PI); ctx.fill();
    }
  }
  ctx.canvas.dataset.drawn = "1";
}

/** Axis-aligned bounds over every point, as a cube (equal scale on x, y, z). */
function bounds3(points) {
  const lo = [Infinity, Infinity, Infinity], hi = [-Infinity, -Infinity, -Infinity];
  for (const p of points) for (let k = 0; k < 3; k++) {
    if (Number.isFinite(p[k])) { lo[k] = Math.min(lo[k], p[k]); hi[k] = Math.max(hi[k], p[k]); }
  }
  if (!Number.isFinite(lo[0])) return { lo: [0, 0, 0], hi: [1, 1, 1], size: 1 };
  const size = Math.max(hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2], 0.01) * 1.1;
  const mid = lo.map((v, k) => (v + hi[k]) / 2);
  return { lo: mid.map((m) => m - size / 2), hi: mid.map((m) => m + size / 2), size };
}

/**
 * The end-effector path in 3-D: a fixed oblique view of the bounding cube, the path coloured
 * from blue (step 1) to red (step H), its shadow on the floor, and the current pose marked.
 * paths: [{pts, dash, color}] (color "time" = the blue→red ramp).
 */
function path3d(ctx, w, h, paths, now, box) {
  const az = (-55 * Math.PI) / 180, el = (28 * Math.PI) / 180;
  const k = Math.min(w, h) * 0.56, cx = w / 2 + 4, cy = h / 2 + 4;
  const unit = (p) => p.map((v, i) => (v - box.lo[i]) / box.size - 0.5);
  const proj = (p) => {
    const [x, y, z] = unit(p);
    const xr = x * Math.cos(az) - y * Math.sin(az);
    const yr = x * Math.sin(az) + y * Math.cos(az);
    return [cx + k * xr, cy - k * (z * Math.cos(el) + yr * Math.sin(el))];
  };
  const corner = (i, j, l) => [i ? box.hi[0] : box.lo[0], j ? box.hi[1] : box.lo[1], l ? box.hi[2] : box.lo[2]];
  ctx.strokeStyle = "#d5d9e0";
  ctx.lineWidth = 1;
  for (const [a, b] of [
    [[0, 0, 0], [1, 0, 0]], [[0, 0, 0], [0, 1, 0]], [[1, 0, 0], [1, 1, 0]], [[0, 1, 0], [1, 1, 0]],
    [[0, 0, 1], [1, 0, 1]], [[0, 0, 1], [0, 1, 1]], [[1, 0, 1], [1, 1, 1]], [[0, 1, 1], [1, 1, 1]],
    [[0, 0, 0], [0, 0, 1]], [[1, 0, 0], [1, 0, 1]], [[0, 1, 0], [0, 1, 1]], [[1, 1, 0], [1, 1, 1]],
  ]) {
    const p = proj(corner(...a)), q = proj(corner(...b));
    ctx.beginPath(); ctx.moveTo(...p); ctx.lineTo(...q); ctx.stroke();
  }
  ctx.fillStyle = "#6b7280";
  ctx.textAlign = "center";
  ctx.textBaseline = "middle";
  // Axis names beside the floor edges nearest the viewer (and one vertical edge), pushed out
  // from the cube's projected centre so they never sit on the path.
  const centre = proj(box.lo.map((v, i) => (v + box.hi[i]) / 2));
  const label = (p, text) => {
    const [x, y] = proj(p), dx = x - centre[0], dy = y - centre[1], n = Math.hypot(dx, dy) || 1;
    ctx.fillText(text, x + (12 * dx) / n, y + (12 * dy) / n);
  };
  const mid = (k) => (box.lo[k] + box.hi[k]) / 2;
  label([mid(0), box.lo[1], box.lo[2]], "x");
  label([box.hi[0], mid(1), box.lo[2]], "y");
  label([box.lo[0], box.lo[1], mid(2)], "z");
  ctx.textAlign = "left";
  ctx.fillText(`cube ${(box.size * 100).toFixed(1)} cm`, 4, h - 8);
  const floor = (p) => [p[0], p[1], box.lo[2]];
  for (const path of paths) {
    // Shadow on the floor, then the path itself.
    ctx.strokeStyle = "rgba(0,0,0,0.12)";
    ctx.setLineDash([]);
    ctx.lineWidth = 1;
    ctx.beginPath();
    path.pts.forEach((p, i) => (i ? ctx.lineTo(...proj(floor(p))) : ctx.moveTo(...proj(floor(p)))));
    ctx.stroke();
    ctx.lineWidth = 2;
    ctx.setLineDash(path.dash ? [4, 3] : []);
    const n = path.pts.length;
    for (let i = 1; i < n; i++) {
      ctx.strokeStyle = path.color === "time" ? `hsl(${220 - (220 * i) / (n - 1)}, 75%, 48%)` : path.color;
      ctx.beginPath(); ctx.moveTo(...proj(path.pts[i - 1])); ctx.lineTo(...proj(path.pts[i])); ctx.stroke();
    }
    ctx.setLineDash([]);
    if (n) {
      const end = proj(path.pts[n - 1]);
      ctx.fillStyle = path.color === "time" ? "#d9480f" : path.color;
      ctx.fillRect(end[0] - 3, end[1] - 3, 6, 6);
    }
  }
  if (now) {
    const p = proj(now), f = proj(floor(now));
    ctx.strokeStyle = "#868e96";
    ctx.setLineDash([2, 2]);
    ctx.beginPath(); ctx.moveTo(...p); ctx.lineTo(...f); ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = "#fff";
    ctx.strokeStyle = "#111";
    ctx.lineWidth = 2;
    ctx.beginPath(); ctx.arc(p[0], p[1], 5, 0, 2 * Math.PI); ctx.fill(); ctx.stroke();
    ctx.fillStyle = "#111";
    ctx.textAlign = "left";
    ctx.fillText("now", p[0] + 8, p[1]);
  }
  ctx.canvas.dataset.drawn = "1";
}

const xyz = (a) => a.eef_9d.map((r) => r.slice(0, 3));
const DROID_KEYS = ["eef_9d", "gripper_position", "joint_position"];
const LINE_COLORS = ["#1c7ed6", "#e8590c", "#2f9e44", "#c2255c", "#7048e8", "#0c8599", "#f59f00",
  "#868e96", "#5c940d", "#d6336c"];

/** How `/info` says an action key of an embodiment is decoded (e.g. "relative XyzRot6d …"). */
function actionRep(embodiment, key) {
  const e = info && (info.embodiments || []).find((x) => x.tag === embodiment);
  const a = e && e.actions.find((x) => x.key === key);
  return (a && a.rep) || "";
}

/** The xyz of every step of an end-effector key, or null for a joint-like key. */
function eefPath(rows, rep) {
  if (/Homogeneous/.test(rep)) return rows.map((r) => [r[3], r[7], r[11]]);
  if (/XyzRot6d|XyzRotvec/.test(rep)) return rows.map((r) => r.slice(0, 3));
  return null;
}

/** Any embodiment: per action key a line per dimension (● the current state when the state
 *  has the key), and a 3-D path for end-effector keys. */
function genericPlots(container, actions, state, small, embodiment) {
  const [w3, wl, h] = small ? [185, 235, 190] : [240, 310, 210];
  const figs = [];
  for (const [key, rows] of Object.entries(actions)) {
    if (!rows.length || !rows[0].length) continue;
    const now = Array.isArray(state[key]) ? state[key] : [];
    const path = eefPath(rows, actionRep(embodiment, key));
    if (path) {
      const cur = now.length >= 3 ? now.slice(0, 3) : null;
      const [f, c, w, hh] = figure(w3, h, `${key}: xyz path (blue → red)${cur ? ", ● now" : ""}`);
      path3d(c, w, hh, [{ pts: path, color: "time" }], cur, bounds3(path.concat(cur ? [cur] : [])));
      figs.push(f);
    }
    const dims = rows[0].length;
    const [f, c, w, hh] = figure(wl, h, `${key} (${dims}) over the horizon${now.length === dims ? ", ● now" : ""}`);
    lines(c, w, hh, rows[0].map((_, j) => ({
      ys: rows.map((r) => r[j]), color: LINE_COLORS[j % LINE_COLORS.length],
      now: now.length === dims ? now[j] : null,
    })));
    figs.push(f);
  }
  container.replaceChildren(...figs);
}

/** Shared scales for several answers to the same request, so their plots compare by eye. */
function scales(actionSets, state) {
  const now = state && state.eef_9d ? [state.eef_9d.slice(0, 3)] : [];
  return {
    box: bounds3(actionSets.flatMap(xyz).concat(now)),
    joints: range(actionSets.flatMap((a) => a.joint_position.flat()).concat(state.joint_position || [])),
    gripper: range(actionSets.flatMap((a) => a.gripper_position.flat()).concat(state.gripper_position || [])),
  };
}

/**
 * The three chunk plots of one answer: xyz path, joints vs the current joints, gripper.
 * `shared` fixes the scales (see `scales`); `small` draws them narrower (demo panels).
 */
function chunkPlots(container, actions, state, shared, small, embodiment) {
  state = state || {};
  if (!DROID_KEYS.every((k) => Array.isArray(actions[k]))) {
    genericPlots(container, actions, state, small, embodiment);
    return;
  }
  const s = shared || scales([actions], state);
  const [wa, wb, wc, h] = small ? [185, 235, 160, 190] : [240, 310, 220, 210];
  const now = state.eef_9d ? state.eef_9d.slice(0, 3) : null;
  const [f1, c1, w1, h1] = figure(wa, h, "end-effector xyz path (blue → red), ● now");
  path3d(c1, w1, h1, [{ pts: xyz(actions), color: "time" }], now, s.box);

  const joints = state.joint_position || [];
  const [f2, c2, w2, h2] = figure(wb, h, "7 joint targets (rad) over the horizon, ● now");
  lines(c2, w2, h2, JOINT_COLORS.map((color, j) => ({
    ys: actions.joint_position.map((r) => r[j]), color, now: joints[j],
  })), s.joints);

  const g = state.gripper_position ? state.gripper_position[0] : null;
  const [f3, c3, w3, h3] = figure(wc, h, "gripper over the horizon, ● now");
  lines(c3, w3, h3, [{ ys: actions.gripper_position.map((r) => r[0]), color: "#0c8599", now: g }], s.gripper);
  container.replaceChildren(f1, f2, f3);
}

function timingBar(container, t, queueMs) {
  const parts = STAGES.map(([name, color]) => [name, color, name === "queue" ? queueMs : t[name]])
    .filter(([, , ms]) => Number.isFinite(ms) && ms > 0);
  const total = parts.reduce((s, [, , ms]) => s + ms, 0) || 1;
  const bar = $(".bar", container), legend = $(".legend", container);
  bar.replaceChildren(...parts.map(([name, color, ms]) =>
    el("span", { title: `${name} ${fmtMs(ms)}`, style: `width:${(100 * ms) / total}%;background:${color}` })));
  legend.replaceChildren(
    ...parts.map(([name, color, ms]) => el("span", {}, el("i", { style: `background:${color}` }), `${name} ${fmtMs(ms)}`)),
    el("span", {}, el("b", {}, `total ${fmtMs(t.total + (queueMs || 0))}`)));
}

// ---- request cards -------------------------------------------------------------------------

function card(e) {
  const node = $("#request-card").content.firstElementChild.cloneNode(true);
  node.dataset.seq = e.seq;
  $(".seq", node).textContent = "#" + e.seq;
  const status = $(".status", node);
  status.textContent = e.status;
  status.classList.add(e.status === 200 ? "ok" : "bad");
  $(".when", node).textContent = new Date(e.unix_ms).toLocaleTimeString();
  const meta = [`id ${e.request_id}`];
  if (e.status === 200) {
    meta.push(`seq_len ${e.seq_len}`, `noise ${e.noise_source}${e.seed != null ? " " + e.seed : ""}`);
  }
  $(".meta", node).textContent = meta.join(" · ");
  if (e.status !== 200) {
    $(".instruction", node).remove();
    const err = $(".error", node);
    err.hidden = false;
    err.textContent = e.error;
    for (const sel of [".frames", ".timing", ".plots"]) $(sel, node).remove();
    return node;
  }
  $(".instruction", node).textContent = `“${e.instruction}”`;
  const frames = $(".frames", node);
  for (const f of e.frames || []) {
    frames.append(el("figure", {}, el("img", { src: f.src, alt: f.label, title: `${f.label}: ${f.width}×${f.height} as the model saw it` }),
      el("figcaption", {}, `${f.label} · ${f.width}×${f.height}`)));
  }
  if (e.frames_error) frames.append(el("p", { className: "error" }, e.frames_error));
  timingBar($(".timing", node), e.timing_ms, e.queue_ms);
  chunkPlots($(".plots", node), e.actions, e.state, null, false, e.embodiment);
  return node;
}

function addEntries(entries) {
  const list = $("#request-list");
  for (const e of entries) list.prepend(card(e));
  while (list.children.length > capacity) list.lastElementChild.remove();
  $("#empty").hidden = list.children.length > 0;
  $("#count").textContent = list.children.length ? `(${list.children.length} of the last ${capacity} kept)` : "";
}

async function poll() {
  const live = $("#live");
  try {
    const r = await fetch(`/ui/requests?after=${latest}`, { cache: "no-store" });
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const j = await r.json();
    if (j.latest < latest) {
      // The server restarted: start over.
      $("#request-list").replaceChildren();
      latest = 0;
      return poll();
    }
    capacity = j.capacity;
    latest = j.latest;
    addEntries(j.entries);
    const q = j.queue;
    live.textContent = `live · ${q.busy ? "computing" : "idle"} · queue ${q.waiting}/${q.capacity} · served ${q.served}`;
    live.className = "pill ok";
  } catch (err) {
    live.textContent = `offline (${err.message})`;
    live.className = "pill bad";
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

// ---- demo ----------------------------------------------------------------------------------

function maxAbsDiff(a, b) {
  let worst = 0;
  for (const key of ["eef_9d", "gripper_position", "joint_position"]) {
    const x = a[key], y = b[key];
    if (!x || !y || x.length !== y.length) return NaN;
    x.forEach((row, i) => row.forEach((v, j) => { worst = Math.max(worst, Math.abs(v - y[i][j])); }));
  }
  return worst;
}

async function runDemo() {
  const button = $("#demo-button"), status = $("#demo-status"), verdict = $("#demo-verdict");
  const result = $("#demo-result");
  button.disabled = true;
  result.dataset.state = "running";
  status.textContent = "running…";
  try {
    const demo = await (await fetch("/demo", { cache: "no-store" })).json();
    const t0 = performance.now();
    const r = await fetch("/predict", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(demo.request),
    });
    const answer = await r.json();
    if (!r.ok) throw new Error(answer.error || `HTTP ${r.status}`);
    const ms = performance.now() - t0;
    const ref = demo.reference;
    const d = maxAbsDiff(answer.actions, ref.actions);
    const sameCkpt = info && info.checkpoint_digest === ref.checkpoint_digest;
    verdict.hidden = false;
    if (sameCkpt && d <= 1e-4) {
      verdict.className = "verdict-ok";
      verdict.textContent = `matches the reference: max |Δ| = ${d.toExponential(2)} (≤ 1e-4) · ${fmtMs(ms)} round trip`;
    } else if (sameCkpt) {
      verdict.className = "verdict-bad";
      verdict.textContent = `differs from the reference: max |Δ| = ${d.toExponential(2)} (> 1e-4)`;
    } else {
      verdict.className = "muted";
      verdict.textContent = `max |Δ| = ${d.toExponential(2)} — the reference belongs to checkpoint ${short(ref.checkpoint_digest, 12)}, ` +
        `this server runs ${short(info && info.checkpoint_digest, 12)}, so they are not expected to agree`;
    }
    verdict.dataset.maxAbsDiff = String(d);
    $("#demo-panels").hidden = false;
    const state = demo.request.state;
    const shared = scales([answer.actions, ref.actions], state);
    chunkPlots($(".plots", result), answer.actions, state, shared, true);
    chunkPlots($(".plots", $("#demo-reference")), ref.actions, state, shared, true);
    status.textContent = `answered in ${fmtMs(ms)} (seq_len ${answer.seq_len}, noise ${answer.noise_source})`;
    result.dataset.state = "done";
  } catch (err) {
    status.textContent = `demo failed: ${err.message}`;
    result.dataset.state = "error";
  } finally {
    button.disabled = false;
  }
}

async function loadInfo() {
  try {
    info = await (await fetch("/info", { cache: "no-store" })).json();
    const parts = [`${info.model_id} @ ${short(info.revision, 7)}`, `weights ${short(info.checkpoint_digest, 10)}`,
      `${info.dtype} on ${info.device}`, `backend ${info.denoise_backend}`, `v${info.version}`];
    if (info.synthetic_weights) parts.push("SYNTHETIC WEIGHTS");
    $("#model").textContent = parts.join(" · ");
  } catch (err) {
    $("#model").textContent = `cannot read /info: ${err.message}`;
  }
}

$("#demo-button").addEventListener("click", runDemo);
loadInfo().then(poll);
