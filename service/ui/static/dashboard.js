// bbkb dashboard: polls the JSON API under /v1 and draws SVG. No dependencies, no build step.
// Study data only ever enters the page through textContent and SVG attributes (never as HTML).
"use strict";

const KEY = "bbkb-api-key";
const query = new URLSearchParams(location.search);
const POLL_MS = Math.max(200, Number(query.get("poll")) || 2000);
const PAGE_SIZE = Math.min(1000, Math.max(1, Number(query.get("page_size")) || 50));
const SVG_NS = "http://www.w3.org/2000/svg";

class AuthNeeded extends Error {}

// ---------------------------------------------------------------- API and key

async function api(path) {
  const key = sessionStorage.getItem(KEY);
  const response = await fetch(path, {headers: key ? {Authorization: "Bearer " + key} : {}});
  if (response.status === 401) {
    showKeyForm(key ? "That API key was refused: enter another." : "This server needs an API key.");
    throw new AuthNeeded();
  }
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON */ }
    const error = new Error(detail);
    error.status = response.status;
    throw error;
  }
  return response;
}

const json = async (path) => (await api(path)).json();

function showKeyForm(text) {
  document.getElementById("key-form").hidden = false;
  document.getElementById("key-forget").hidden = true;
  say(text);
}

function say(text, isError = false) {
  const message = document.getElementById("message");
  message.textContent = text || "";
  message.hidden = !text;
  message.classList.toggle("error", isError);
}

function setupKey(refresh) {
  const form = document.getElementById("key-form");
  const forget = document.getElementById("key-forget");
  forget.hidden = !sessionStorage.getItem(KEY);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("key-input");
    if (!input.value.trim()) return;
    sessionStorage.setItem(KEY, input.value.trim());
    input.value = "";
    form.hidden = true;
    forget.hidden = false;
    say("");
    refresh();
  });
  forget.addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    location.reload();
  });
}

// Runs refresh now and POLL_MS after each run; a new run never overlaps a running one (one
// asked for meanwhile runs next). A failure is shown until the next successful run. Polling
// stops at a 401 until a key is entered (the key form runs refresh), and for good at a 404
// when notFound (called with the error) is given.
function poll(refresh, notFound) {
  const status = document.getElementById("poll-status");
  let running = false, again = false, timer = null;
  const tick = async () => {
    clearTimeout(timer);
    if (running) { again = true; return; }
    running = true;
    let next = POLL_MS;
    try {
      await refresh();
      status.textContent = "updated " + new Date().toLocaleTimeString();
      if (document.getElementById("message").classList.contains("error")) say("");
    } catch (error) {
      if (error instanceof AuthNeeded) {
        next = null;
        status.textContent = "waiting for an API key";
      } else if (error.status === 404 && notFound) {
        next = null;
        status.textContent = "stopped";
        notFound(error);
      } else {
        say(error.message, true);
      }
    } finally {
      running = false;
      if (again) next = 0;
      again = false;
      if (next !== null) timer = setTimeout(tick, next);
    }
  };
  setupKey(tick);
  tick();
}

// ---------------------------------------------------------------- formatting

// A value with 5 significant digits at every magnitude (1.2346e-7, 0.0012346, 1.2346e9).
function fmt(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "";
  const a = Math.abs(v);
  if (a === 0 || (a >= 1e-4 && a < 1e6) || !Number.isFinite(a)) {
    return String(Number(v.toPrecision(5)));
  }
  return v.toExponential(4).replace(/\.?0+e/, "e").replace("e+", "e");
}

function ago(iso) {
  const seconds = (Date.now() - Date.parse(iso)) / 1000;
  if (seconds < 60) return Math.max(0, Math.round(seconds)) + " s ago";
  if (seconds < 3600) return Math.round(seconds / 60) + " min ago";
  if (seconds < 172800) return Math.round(seconds / 3600) + " h ago";
  return Math.round(seconds / 86400) + " days ago";
}

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (className) td.className = className;
  return td;
}

// ---------------------------------------------------------------- SVG plots

// About count ticks in [lo, hi] at multiples of a step of 1, 2 or 5 x 10^k (whole numbers
// only when integer), each with its label.
function niceTicks(lo, hi, count = 5, integer = false) {
  const span = hi - lo;
  const step10 = Math.pow(10, Math.floor(Math.log10(span / count)));
  const nice = [1, 2, 5, 10].map((m) => m * step10).find((s) => span / s <= count) || 10 * step10;
  const step = integer ? Math.max(1, Math.round(nice)) : nice;
  const first = Math.ceil(lo / step - 1e-9);
  const n = Math.max(0, Math.floor(hi / step + 1e-9) - first + 1);
  const ticks = Array.from({length: n}, (_, i) => (first + i) * step);
  return {ticks, labels: tickLabels(ticks, step)};
}

// Labels with the decimals the step needs, so that distinct ticks read differently; a shared
// power of ten (2.5e7, 2.50001e-6) where plain decimals would be long.
function tickLabels(ticks, step) {
  const k = Math.floor(Math.log10(step) + 1e-9);  // step = m x 10^k
  const top = ticks.reduce((m, t) => Math.max(m, Math.abs(t)), 0);
  const e = top ? Math.floor(Math.log10(top) + 1e-9) : 0;
  if (e >= -4 && e < 6) return ticks.map((t) => t.toFixed(Math.max(0, -k)));
  return ticks.map((t) => t === 0 ? "0" : (t / 10 ** e).toFixed(Math.max(0, e - k)) + "e" + e);
}

function svgEl(parent, tag, attributes, text) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attributes)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  parent.appendChild(el);
  return el;
}

// [lo, hi] of the values, padded by padFraction of the range; a flat range by 10% of the value
// (at least 1 for whole numbers, 1 for zero).
function extent(values, padFraction, integer = false) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of values) { if (v < lo) lo = v; if (v > hi) hi = v; }
  const pad = lo === hi ? Math.max(Math.abs(lo) * 0.1, integer ? 1 : 0) || 1
    : (hi - lo) * padFraction;
  return [lo - pad, hi + pad];
}

const PALETTE = ["#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2", "#65a30d",
                 "#dc2626"];

// Ticks of a log10 axis spanning [lo, hi] (log10 units): the powers of ten inside, or, within
// less than about a decade, 1-2-5 ticks of the values themselves; labelled with their values.
function logTicks(lo, hi) {
  const first = Math.ceil(lo - 1e-9), last = Math.floor(hi + 1e-9);
  if (last - first >= 1) {
    const every = Math.max(1, Math.ceil((last - first + 1) / 7));
    const ticks = [];
    for (let k = first; k <= last; k += every) ticks.push(k);
    return {ticks, labels: ticks.map((k) => fmt(Number("1e" + k)))};
  }
  const linear = niceTicks(10 ** lo, 10 ** hi, 4).ticks.filter((t) => t > 0);
  return {ticks: linear.map(Math.log10), labels: linear.map((t) => fmt(Number(t.toPrecision(6))))};
}

// One path per series: "line" (one vertex per point), "steps" (a value held from its x to the
// next point's: M x y, then H x V y per point), "dots" (M x y h0 per point), "bars"
// (M x y0 V y per point). Each path carries data-points = its number of points; a line or steps
// of at most MARKED points also gets a "marks" path with a dot per point (one point shows).
// y: one series; or series: [{y, name}] sharing x (a legend names them, PALETTE colours them).
// integerX / integerY: ticks on whole numbers only (evaluations, batches, counts); yMin: the
// lowest value the y axis shows (0 for what cannot be negative). x is never negative.
// empty: the text shown without data. log: a log10 y axis over the positive values (values
// <= 0 are drawn at its bottom; without any positive value the axis stays linear); the svg's
// data-scale says which ("log" or "linear").
const MARKED = 60;
const CHAR = 6.5;  // the width of a tick label's character (11px), for the left margin

function plot(svg, {x, y, series, kind, xLabel, yLabel, xFrom0 = false, integerX = true,
                    integerY = false, yMin = -Infinity, empty = "no data yet", log = false}) {
  svg.replaceChildren();
  const W = 480, H = 240, R = 14, T = 10, B = 40;
  series = series || [{y, name: ""}];
  const positive = series.flatMap((s) => s.y.filter((v) => v > 0));
  log = log && positive.length > 0 && x.length > 0;
  svg.dataset.scale = log ? "log" : "linear";
  if (!x.length) {
    svgEl(svg, "text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty"}, empty);
    return;
  }
  let [x0, x1] = extent(x, kind === "bars" ? 0.04 : 0.02, integerX);
  if (xFrom0) x0 = Math.min(x0, 0);
  let y0, y1, yTicks;
  if (log) {  // from here on, y is in log10 units
    [y0, y1] = extent(positive.map(Math.log10), 0.06);
    if (y1 - y0 < 0.3) [y0, y1] = [(y0 + y1) / 2 - 0.15, (y0 + y1) / 2 + 0.15];
    series = series.map((s) => ({...s, y: s.y.map((v) => v > 0 ? Math.log10(v) : y0)}));
    yTicks = logTicks(y0, y1);
  } else {
    [y0, y1] = extent(series.flatMap((s) => s.y), 0.06, integerY);
    if (kind === "bars") { y0 = Math.min(0, y0); y1 = Math.max(0, y1); }
    y0 = Math.max(y0, yMin);
    yTicks = niceTicks(y0, y1, 5, integerY);
  }
  const L = Math.max(40, 26 + CHAR * Math.max(...yTicks.labels.map((l) => l.length)));
  const sx = (v) => L + (v - x0) / (x1 - x0) * (W - L - R);
  const sy = (v) => T + (y1 - v) / (y1 - y0) * (H - T - B);
  yTicks.ticks.forEach((t, i) => {
    svgEl(svg, "line", {x1: L, x2: W - R, y1: sy(t), y2: sy(t), class: "grid"});
    svgEl(svg, "text", {x: L - 6, y: sy(t) + 4, "text-anchor": "end"}, yTicks.labels[i]);
  });
  const xTicks = niceTicks(Math.max(0, x0), x1, 6, integerX);
  xTicks.ticks.forEach((t, i) => {
    svgEl(svg, "line", {x1: sx(t), x2: sx(t), y1: H - B, y2: H - B + 4, class: "axis"});
    svgEl(svg, "text", {x: sx(t), y: H - B + 16, "text-anchor": "middle"}, xTicks.labels[i]);
  });
  svgEl(svg, "line", {x1: L, x2: L, y1: T, y2: H - B, class: "axis"});
  svgEl(svg, "line", {x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis"});
  svgEl(svg, "text", {x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle", class: "label"},
        xLabel);
  svgEl(svg, "text", {x: 12, y: (T + H - B) / 2, "text-anchor": "middle", class: "label",
                      transform: `rotate(-90 12 ${(T + H - B) / 2})`}, yLabel);
  const base = sy(log ? y0 : Math.max(y0, Math.min(0, y1)));
  const px = x.map((v) => sx(v).toFixed(1));
  series.forEach(({y: ys, name}, k) => {
    const py = ys.map((v) => sy(v).toFixed(1));
    const parts = px.map((p, i) => kind === "line" ? (i ? "L" : "M") + p + " " + py[i]
      : kind === "steps" ? (i ? "H" + p + "V" : "M" + p + " ") + py[i]
      : kind === "dots" ? "M" + p + " " + py[i] + "h0"
      : "M" + p + " " + base.toFixed(1) + "V" + py[i]);
    const path = svgEl(svg, "path", {d: parts.join(""), class: "series " + kind,
                                     "data-points": x.length, "data-name": name});
    if (kind === "bars") {  // as wide as 70% of the space between bars (a style beats the CSS)
      path.style.strokeWidth = Math.max(1, Math.min(24, 0.7 * (W - L - R) / (x1 - x0)));
    }
    const marks = (kind === "line" || kind === "steps") && x.length <= MARKED
      ? svgEl(svg, "path", {d: px.map((p, i) => "M" + p + " " + py[i] + "h0").join(""),
                            class: "marks"}) : null;
    if (series.length > 1) path.style.stroke = PALETTE[k % PALETTE.length];
    if (marks) marks.style.stroke = path.style.stroke;
  });
  if (series.length > 1) {
    const points = series.flatMap(({y: ys}) => ys.map((v, i) => [sx(x[i]), sy(v)]));
    legend(svg, series, points, {left: L + 4, right: W - R - 4, top: T + 4, bottom: H - B - 4});
  }
}

// The series' names and colours in a box, in the corner of the plot area ``inner`` that hides
// the fewest of ``points`` ([x, y] in svg units): top right, else top left, bottom right,
// bottom left (pinned top right, it hid the newest lengthscales of an ARD study).
function legend(svg, series, points, inner) {
  const width = 30 + CHAR * Math.max(...series.map((s) => s.name.length));
  const height = 14 * series.length + 6;
  const corners = [[inner.right - width, inner.top], [inner.left, inner.top],
                   [inner.right - width, inner.bottom - height],
                   [inner.left, inner.bottom - height]];
  const hidden = ([left, top]) => points.filter(([px, py]) => px >= left && px <= left + width
    && py >= top && py <= top + height).length;
  const [left, top] = corners.reduce((best, c) => hidden(c) < hidden(best) ? c : best);
  const box = svgEl(svg, "g", {class: "legend"});
  svgEl(box, "rect", {x: left, y: top, width, height});
  series.forEach(({name}, k) => {
    const ly = top + 15 + 14 * k;
    svgEl(box, "line", {x1: left + 6, x2: left + 20, y1: ly - 4, y2: ly - 4,
                        stroke: PALETTE[k % PALETTE.length], "stroke-width": 2});
    svgEl(box, "text", {x: left + 24, y: ly}, name);
  });
}

// best[i] = the best of values[0..i]
function runningBest(values, maximize) {
  const best = new Array(values.length);
  const better = maximize ? Math.max : Math.min;
  for (let i = 0; i < values.length; i++) best[i] = i ? better(best[i - 1], values[i]) : values[i];
  return best;
}

// ---------------------------------------------------------------- kernel hyper-parameters

const MAX_LENGTHSCALE_SERIES = 8;
// service/engine/autokernel.py's SMOOTHING and LAM_FLOOR (a test checks they agree)
const SMOOTHING = 1.25;
const LAM_FLOOR = 0.1;

// The lengthscales of batches (each with hyper-parameters) as plot series: one (isotropic), or
// one per dimension for ARD with up to MAX_LENGTHSCALE_SERIES dimensions; with more, the
// MAX_LENGTHSCALE_SERIES - 1 dimensions shortest in the last batch (the inputs the values vary
// along most; a geometric mean of all hid them) and the geometric mean of the others. An ARD
// study's batches before its first accepted fit hold one lengthscale for every dimension.
function lengthscaleSeries(batches, names) {
  const ells = batches.map((b) => b.hyperparameters.lengthscale);
  const q = ells.reduce((m, l) => Math.max(m, l.length), 1);
  if (q === 1) return [{y: ells.map((l) => l[0]), name: "lengthscale"}];
  const at = (l, j) => l[l.length === 1 ? 0 : j];
  const dimension = (j) => ({y: ells.map((l) => at(l, j)), name: names[j] || "x" + j});
  if (q <= MAX_LENGTHSCALE_SERIES) return Array.from({length: q}, (_, j) => dimension(j));
  const last = ells[ells.length - 1];
  const order = Array.from({length: q}, (_, j) => j).sort((i, j) => at(last, i) - at(last, j));
  const shown = order.slice(0, MAX_LENGTHSCALE_SERIES - 1);
  const rest = order.slice(MAX_LENGTHSCALE_SERIES - 1);
  const mean = (l) => Math.exp(rest.reduce((a, j) => a + Math.log(at(l, j)), 0) / rest.length);
  return [...shown.map(dimension),
          {y: ells.map(mean), name: `geometric mean of the other ${rest.length}`}];
}

// Where the batches' lengthscales came from, as runs of equal sources ("start (batches 0-2),
// fit (3-9), floor (10)"): the plot's steps do not say, and a floor after a fit looks like
// a fit that changed its mind.
function sourceRuns(batches) {
  const runs = [];
  for (const {index, hyperparameters: hp} of batches) {
    const source = hp.source ?? "unrecorded", last = runs[runs.length - 1];
    if (last && last.source === source) last.to = index;
    else runs.push({source, from: index, to: index});
  }
  return runs.map(({source, from, to}) => `${source} (${from === to ? `batch ${from}`
    : `batches ${from}-${to}`})`).join(", ");
}

// The refits the batches record, in order: each fitted_at > 0 once, kept if the fitted signal
// and noise variances (the last kept fit's) changed with it.
function refits(batches) {
  const out = [];
  let previous = null;
  for (const {hyperparameters: hp} of batches) {
    if (hp.fitted_at && hp.fitted_at !== previous?.fitted_at) {
      out.push({at: hp.fitted_at, kept: hp.variance !== null && (previous === null
        || hp.variance !== previous.variance || hp.noise !== previous.noise)});
    }
    previous = hp;
  }
  return out;
}

// Where an automatic kernel's lambda comes from (autokernel.fitted_lam).
function lamSource(hp, configured) {
  if (hp.variance === null) return `the configured ${configured} (no fit kept yet)`;
  if (hp.source === "floor") {
    return `the configured ${configured}: a fit as short as the floor interpolates anything`;
  }
  const ratio = hp.noise / hp.variance;
  return `the kept fit's noise / signal variance, ${fmt(ratio)}` + (
    ratio < LAM_FLOOR * configured ? `, raised to ${LAM_FLOOR}x the configured ${configured}`
      : ratio > configured ? `, lowered to the configured ${configured}` : "");
}

// The "last refit" row: when, and whether it was kept (a later refit that BIC does not keep
// leaves the variances and lambda of the kept one, which the row then names).
function lastRefit(hp, batches) {
  if (hp.source === "fixed") return "never: fixed by the configuration";
  if (!hp.fitted_at) return "none yet (initial values)";
  if (hp.variance === null) return `at ${hp.fitted_at} observations (not kept: the data `
    + "looked like noise)";
  const all = refits(batches);
  const kept = all.filter((r) => r.kept && r.at <= hp.fitted_at);
  const keptAt = kept.length ? kept[kept.length - 1].at : hp.fitted_at;
  return `at ${hp.fitted_at} observations` + (keptAt === hp.fitted_at ? ""
    : `, not kept (no better by BIC); variances and \u03bb from the fit at ${keptAt}`);
}

// Strategies without a kernel: uniform random search has no model, GO-UCB a neural network
// (their batches record no hyper-parameters). GSSBO's batches record its own Matern fit.
const NO_KERNEL = ["uniform", "go-ucb"];
const hasKernel = (study) => !NO_KERNEL.includes(study.strategy);

// The current batch's hyper-parameters (GET /v1/studies/{id} .hyperparameters) as table rows;
// numbers show 5 digits, their full value is in data-value and the tooltip.
function showHyperparameters(study, batches) {
  document.getElementById("hyperparameters").closest(".config > div").hidden = !hasKernel(study);
  const hp = study.hyperparameters;
  const body = document.querySelector("#hyperparameters tbody");
  body.replaceChildren();
  document.getElementById("hyperparameters-none").hidden = hp !== null;
  document.getElementById("hyperparameters").hidden = hp === null;
  if (hp === null) return;
  const engine = study.spec.engine || {};
  const gssbo = study.strategy === "gssbo";
  const automatic = !gssbo && engine.hyperparameters === "auto";  // the engine's own fits
  const scaled = engine.normalize && engine.normalize !== "none";
  const rows = [["chosen", "mode", gssbo ? "by GSSBO: a Matern-5/2 fit on its buffer at each batch"
    : engine.hyperparameters === "auto" ? "automatically (marginal likelihood)" : "fixed"],
    ["inputs", "normalize", gssbo ? "scaled to [0, 1] by GSSBO (lengthscales in those units)"
      : scaled ? `${engine.normalize}-normalised (lengthscales in those units)` : "as given"]];
  hp.lengthscale.forEach((v, j) => rows.push(hp.lengthscale.length === 1
    ? ["lengthscale", "lengthscale", v]
    : [`lengthscale ${study.parameter_names[j] || "x" + j}`, "lengthscale-" + j, v]));
  const root = Math.sqrt(2 * study.dim);  // sqrt(2d), the start on z-scored candidates
  const below = hp.variance !== null ? "the last kept fit, lengthened, falls below it"
    : hp.fitted_at ? "a fit (not kept) put it below" : "the candidates are too sparse for the "
      + "longer start";
  const sources = gssbo ? {
    start: "GSSBO's default values (fewer than 3 observations)",
    fit: "GSSBO's fit at this batch"} : {
    fixed: "the configuration (hyperparameters: fixed)",
    start: "the start: the RMS distance between candidates (no fit kept yet)",
    floor: `the neighbour floor, the shortest that links nearest candidates: ${below}. A `
      + "prior choice, not one the data made; if it stays there in 20 or more dimensions, fixed "
      + `lengthscales between sqrt(2d)/3 and sqrt(2d) (${fmt(root / 3)} to ${fmt(root)}) may `
      + "do better (README, Kernel hyper-parameters)",
    fit: "the last kept fit, lengthened" + (hp.smoothing ? ` ${fmt(hp.smoothing)}x` : "")
      + (!hp.smoothing || hp.smoothing === SMOOTHING ? " (the default factor)"
        : ` (the smoothest lengthscale its likelihood does not reject: ${SMOOTHING}x, the `
          + "default, would fall below the neighbour floor)")};
  if (sources[hp.source]) rows.push(["lengthscale from", "source", sources[hp.source]]);
  rows.push(["\u03bb (regulariser)", "lam", hp.lam]);
  if (automatic) rows.push(["\u03bb from", "lam-source", lamSource(hp, engine.lam)]);
  rows.push(
            ["signal variance", "variance", hp.variance ?? "not fitted"],
            ["noise variance", "noise", hp.noise ?? "not fitted"],
            ["last refit", "fitted_at", lastRefit(hp, gssbo ? [] : batches)]);  // GSSBO: per batch
  if (automatic) {  // README: Seeing and fixing it; client.Study.frozen_engine gives the same
    const kernel = {...(engine.kernel || {name: "rbf"}),  // its variance too
                    lengthscale: hp.lengthscale.length === 1 ? hp.lengthscale[0] : hp.lengthscale};
    const settings = JSON.stringify(  // spaced after commas, so that the cell wraps
      {hyperparameters: "fixed", normalize: engine.normalize || "zscore", lam: hp.lam, kernel});
    rows.push(["to freeze it", "freeze",
               "a new study's engine settings: " + settings.replaceAll(",", ", ")]);
  }
  for (const [label, key, value] of rows) {
    const row = body.insertRow();
    row.dataset.key = key;
    const th = document.createElement("th");
    th.textContent = label;
    row.appendChild(th);
    if (typeof value !== "number") { cell(row, value); continue; }
    const td = cell(row, fmt(value), "num");
    td.dataset.value = td.title = String(value);
  }
}

// ---------------------------------------------------------------- workers' queue

// The Redis queue the server dispatches to (GET /v1/queue: always 200, its redis field says
// "ok", "unreachable" or "not configured"), or null when it cannot be had. Never throws, so
// that the rest of the page is shown whatever happens to it: a network error or a server
// error gives {redis: "error", detail}; a server without the route (404) gives null and
// gone() is true from then on (the page stops asking).
function queueSource() {
  let missing = false;
  const read = async () => {
    if (missing) return null;
    try {
      return await json("/v1/queue");
    } catch (error) {
      if (error instanceof AuthNeeded) return null;  // the key form is shown already
      if (error.status === 404) { missing = true; return null; }
      return {redis: "error", detail: error.message || String(error)};
    }
  };
  return {read, gone: () => missing};
}

// "no worker is listening on the queue: start `bbkb worker`" as text and a code element.
function noWorkerHint() {
  const command = document.createElement("code");
  command.textContent = "bbkb worker";
  return ["no worker is listening on the queue: start ", command];
}

// The queue line above the studies: its workers and jobs, a warning when Redis does not answer,
// a discreet note without Redis, and a table of the workers (folded).
function showQueue(state) {
  const box = document.getElementById("queue");
  box.hidden = state === null;
  if (state === null) return;
  box.dataset.redis = state.redis;
  const text = document.getElementById("queue-text");
  const detail = document.getElementById("queue-detail");
  detail.textContent = state.detail ? `(${state.detail})` : "";
  text.title = state.detail || "";
  const workers = state.redis === "ok" ? state.workers : [];
  box.dataset.workers = workers.length;
  if (state.redis === "ok") {
    const busy = workers.filter((w) => w.current_job || w.state === "busy").length;
    const parts = [`Workers: ${workers.length}` + (workers.length ? ` (${busy} busy)` : "") +
      ` \u00b7 jobs: ${state.queued} queued, ${state.started} running, ${state.failed} failed`];
    if (!workers.length && state.queued) {
      const hint = document.createElement("span");
      hint.className = "warn";
      hint.id = "queue-hint";
      hint.append(...noWorkerHint());
      parts.push(" \u2014 ", hint);
    }
    text.replaceChildren(...parts);
  } else if (state.redis === "unreachable") {
    text.textContent = "\u26a0 Redis unreachable: server-side dispatches cannot send trials " +
      "to the workers";
  } else if (state.redis === "not configured") {
    text.textContent = "No Redis configured (server-side dispatch off)";
  } else {
    text.textContent = "Queue state unavailable";
  }
  const folded = document.getElementById("queue-workers-box");
  folded.hidden = !workers.length;
  document.getElementById("queue-workers-summary").textContent =
    workers.length === 1 ? "the worker" : `the ${workers.length} workers`;
  const body = document.querySelector("#queue-workers tbody");
  body.replaceChildren();
  for (const w of workers) {
    const row = body.insertRow();
    cell(row, w.name);
    cell(row, w.state);
    cell(row, w.current_job);
    cell(row, w.last_heartbeat ? ago(w.last_heartbeat) : "").title = w.last_heartbeat || "";
  }
}

// ---------------------------------------------------------------- studies page

// The studies whose name, strategy, mode or status contain every word of the search text
// (any case): "bbkb running" finds the running BBKB studies.
function matches(study, text) {
  const words = text.toLowerCase().split(/\s+/).filter(Boolean);
  const hay = [study.name, study.strategy, study.mode, study.status].join(" ").toLowerCase();
  return words.every((w) => hay.includes(w));
}

function studiesPage() {
  const table = document.getElementById("studies");
  const search = document.getElementById("studies-filter");
  const sort = {key: "last_activity", dir: -1};
  let rows = [];
  search.value = query.get("q") || "";
  const compare = (a, b) => {
    const u = a[sort.key], v = b[sort.key];
    if (u === v) return a.id - b.id;
    if (u === null || u === undefined) return 1;  // missing values last in both directions
    if (v === null || v === undefined) return -1;
    return (u < v ? -1 : 1) * sort.dir;
  };
  const render = () => {
    for (const th of table.tHead.rows[0].cells) {
      th.setAttribute("aria-sort", th.dataset.sort !== sort.key ? "none"
        : sort.dir > 0 ? "ascending" : "descending");
    }
    const body = table.tBodies[0];
    body.replaceChildren();
    const shown = rows.filter((s) => matches(s, search.value));
    for (const s of shown.sort(compare)) {
      const row = body.insertRow();
      row.dataset.studyId = s.id;
      const link = document.createElement("a");
      link.href = "/ui/studies/" + s.id;
      link.textContent = s.name;
      row.insertCell().appendChild(link);
      cell(row, s.strategy + " (" + s.mode + ")");
      cell(row, s.status);
      cell(row, s.completed, "num");
      cell(row, s.failed, "num");
      cell(row, fmt(s.best_value), "num");
      cell(row, ago(s.last_activity)).title = s.last_activity;
    }
    document.getElementById("studies-empty").hidden = rows.length > 0;
    document.getElementById("studies-none-match").hidden = !rows.length || shown.length > 0;
    document.getElementById("studies-shown").textContent = search.value.trim()
      ? `${shown.length} of ${rows.length} studies` : "";
  };
  search.addEventListener("input", () => {  // kept in the address: a reload keeps the filter
    const url = new URL(location.href);
    if (search.value) url.searchParams.set("q", search.value);
    else url.searchParams.delete("q");
    history.replaceState(null, "", url);
    render();
  });
  for (const th of table.tHead.rows[0].cells) {
    th.addEventListener("click", () => {
      sort.dir = sort.key === th.dataset.sort ? -sort.dir : 1;
      sort.key = th.dataset.sort;
      render();
    });
  }
  const queue = queueSource();
  poll(async () => {
    const queueState = queue.read();  // meanwhile (it never throws)
    const found = [];  // every page (keyset pagination: follow next_after)
    for (let after = 0; after !== null;) {
      const page = await json("/v1/summaries?limit=1000&after=" + after);
      found.push(...page.studies);
      after = page.next_after;
    }
    rows = found;
    render();
    showQueue(await queueState);
  });
}

// ---------------------------------------------------------------- study page

// The best value observed so far (GET /v1/studies/{id} .best: a measured value, not a model's
// estimate), with its trial and parameters.
function showBest(study) {
  const box = document.getElementById("study-best");
  const best = study.best;
  if (!best) {
    box.textContent = "No value observed yet.";
    return;
  }
  const value = document.createElement("strong");
  value.id = "best-value";
  value.textContent = fmt(best.value);
  value.title = String(best.value);
  const params = document.createElement("code");
  params.id = "best-parameters";
  params.textContent = paramsText(best.parameters);
  const which = study.direction === "maximize" ? "highest" : "lowest";
  box.replaceChildren(`Best observed so far (the ${which} value measured): `, value,
                      ` at trial t=${best.t} (batch ${best.batch}), parameters `, params);
}

// The study's server-side dispatch (GET /v1/studies/{id}/dispatch); hidden without one.
function showDispatch(dispatch, study) {
  const box = document.getElementById("dispatch");
  box.hidden = !dispatch || dispatch.status === null;
  if (box.hidden) return;
  box.dataset.status = dispatch.status;
  const n = dispatch.n_evaluations || 0;
  const progress = document.getElementById("dispatch-progress");
  progress.max = Math.max(1, n);
  progress.value = Math.min(dispatch.finished, n);
  const state = {running: "running", done: "done",
                 paused: "paused (the trials in flight finish, no new ones are sent)"};
  const stalled = dispatch.status === "running" && study.status !== "active"
    ? `; the study is ${study.status}, so no trials are sent` : "";
  document.getElementById("dispatch-text").textContent =
    `Server-side dispatch ${state[dispatch.status] || dispatch.status}${stalled}: ` +
    `${dispatch.finished} of ${n} evaluations finished, ${dispatch.in_flight} trials pending or ` +
    `running, at most ${dispatch.parallelism} at a time; objective ${dispatch.objective}`;
}

const paramsText = (parameters) => Object.entries(parameters).map(([k, v]) =>
  k + "=" + (typeof v === "number" ? fmt(v) : v)).join(" ");

function studyPage(id) {
  const base = "/v1/studies/" + id;
  // cursors[i]: the API's after= of page i (undefined: the first page, newest or oldest), the
  // t the page before it ended at; null past the last page. One request per page: the API pages
  // newest first itself (order=desc, then after= means t < after). starts[i]: how many trials
  // the pages before page i held (fewer than PAGE_SIZE each under a lower server page limit).
  const filter = document.getElementById("status-filter");
  const order = document.getElementById("trials-order");  // (a browser may restore them)
  const pages = {status: filter.value, order: order.value, cursors: [undefined],
                 starts: [0], index: 0};
  let study = null;
  let seen = "";
  let dispatch = null, dispatchPolls = 0;

  const refreshTrials = async () => {
    const total = pages.status ? study.counts[pages.status] : study.n_trials;
    const cursor = pages.cursors[pages.index];
    // one trial more than a page: whether an older (newer) one follows, so that "next" is off
    // on the last page even when the count is a multiple of the page size
    const params = new URLSearchParams({order: pages.order === "oldest" ? "asc" : "desc",
                                        limit: PAGE_SIZE + 1});
    if (cursor !== undefined) params.set("after", cursor);
    if (pages.status) params.set("status", pages.status);
    const page = await json(base + "/trials?" + params);
    const trials = page.trials.slice(0, PAGE_SIZE);
    // (a server whose page limit is below PAGE_SIZE + 1 answers fewer, with next_after)
    const next = page.trials.length > PAGE_SIZE ? trials[PAGE_SIZE - 1].t : page.next_after;
    const body = document.querySelector("#trials tbody");
    body.replaceChildren();
    for (const t of trials) {
      const row = body.insertRow();
      row.dataset.t = t.t;
      cell(row, t.t, "num");
      cell(row, t.status);
      cell(row, fmt(t.value), "num");
      cell(row, t.batch, "num");
      cell(row, t.attempt, "num");
      cell(row, t.worker_id);
      cell(row, paramsText(t.parameters), "params");
      cell(row, t.completed_at ? new Date(t.completed_at).toLocaleString() : "");
      cell(row, t.error, "error");
    }
    pages.cursors[pages.index + 1] = next;
    pages.starts[pages.index + 1] = pages.starts[pages.index] + trials.length;
    document.getElementById("page-prev").disabled = pages.index === 0;
    document.getElementById("page-next").disabled = next === null;
    const first = pages.starts[pages.index];
    document.getElementById("page-info").textContent = trials.length
      ? `page ${pages.index + 1}: trials ${first + 1}-${first + trials.length} of ${total}, ` +
        (pages.order === "oldest" ? "oldest first" : "newest first")
      : `no ${pages.status || ""} trials`.replace("  ", " ");
  };

  const refreshFailed = async () => {
    const [failed, abandoned] = await Promise.all(["failed", "abandoned"].map((s) =>
      json(`${base}/trials?status=${s}&limit=100`)));
    const trials = [...failed.trials, ...abandoned.trials].sort((a, b) => a.t - b.t);
    const body = document.querySelector("#failed tbody");
    body.replaceChildren();
    for (const t of trials) {
      const row = body.insertRow();
      row.dataset.t = t.t;
      cell(row, t.t, "num");
      cell(row, t.status);
      cell(row, t.attempt, "num");
      cell(row, t.worker_id);
      cell(row, t.error || "(no reason given)", "error");
    }
    const n = study.counts.failed + study.counts.abandoned;
    document.getElementById("failed-count").textContent =
      n > trials.length ? `(${n}; the first ${trials.length} shown)` : `(${n})`;
  };

  // Completed trials in completion order, and the batches in index order: only the rows not
  // seen yet are fetched (and the batches from the first still open on, which may change).
  const history = {t: [], value: [], elapsed: [], noiseless: null, optimum: null};
  let b = [];
  const refreshPlots = async () => {
    const open = b.findIndex((r) => r.closed_at === null);
    const keep = open < 0 ? b.length : open;
    const after = keep ? b[keep - 1].index : -1;
    const [more, batches] = await Promise.all([
      json(`${base}/history?offset=${history.t.length}`), json(`${base}/batches?after=${after}`)]);
    b = b.slice(0, keep).concat(batches.batches);
    if (more.offset === history.t.length) {
      for (const k of ["t", "value", "elapsed"]) history[k] = history[k].concat(more[k]);
      if (more.noiseless !== null) {
        history.noiseless = (history.noiseless || []).concat(more.noiseless);
      }
      history.optimum = more.optimum;
    }
    draw();
  };

  // Whether the plot is drawn on a log scale: its switch is on and usable (only positive values,
  // or with zerosOk positive values and zeros, which then lie at the axis' bottom).
  const logScale = (plotId, values, zerosOk = false) => {
    const box = document.querySelector(`input[data-log="${plotId}"]`);
    const usable = values.some((v) => v > 0) && values.every((v) => v > 0 || (zerosOk && v === 0));
    box.disabled = !usable;
    box.parentElement.title = usable ? "logarithmic y axis"
      : "a log scale needs positive values";
    return usable && box.checked;
  };

  const draw = () => {
    const n = history.value.length;
    const failed = study.counts.failed + study.counts.abandoned;
    const empty = failed ? `no completed trials (${failed} failed)` : "no data yet";
    const maximize = study.direction === "maximize";
    const evaluations = Array.from({length: n}, (_, i) => i + 1);
    const best = runningBest(history.value, maximize);
    plot(document.getElementById("plot-best"),
         {x: evaluations, y: best, kind: "line", xLabel: "evaluations",
          yLabel: "best observed so far", empty, log: logScale("plot-best", best)});
    document.getElementById("figure-regret").hidden = history.optimum === null;
    if (history.optimum !== null) {
      const regret = runningBest(history.noiseless, maximize)
        .map((v) => Math.abs(history.optimum - v));
      const log = logScale("plot-regret", regret, true);
      document.getElementById("regret-caption").textContent =
        `simple regret vs evaluations (optimum ${fmt(history.optimum)})` +
        (log && regret.includes(0) ? "; regret 0 drawn at the bottom" : "");
      plot(document.getElementById("plot-regret"),
           {x: evaluations, y: regret, kind: "line", xLabel: "evaluations", yLabel: "regret",
            yMin: 0, empty, log});
    }
    const longest = n ? history.elapsed[n - 1] : 0;
    const [unit, scale] = longest > 7200 ? ["h", 3600] : longest > 120 ? ["min", 60] : ["s", 1];
    plot(document.getElementById("plot-values"),
         {x: history.elapsed.map((s) => s / scale), y: history.value, kind: "dots",
          xLabel: `time since the study was created (${unit})`, yLabel: "value", xFrom0: true,
          integerX: false, empty, log: logScale("plot-values", history.value)});
    plot(document.getElementById("plot-batch-size"),
         {x: b.map((r) => r.index), y: b.map((r) => r.size), kind: "bars", xLabel: "batch",
          yLabel: "trials", integerY: true, yMin: 0});
    plot(document.getElementById("plot-dictionary"),
         {x: b.map((r) => r.index), y: b.map((r) => r.dictionary_size), kind: "line",
          xLabel: "batch", yLabel: "dictionary points", integerY: true, yMin: 0});
    for (const [id, key, none] of [["plot-resparsify", "resparsify_seconds", "not measured"],
                                   ["plot-open", "open_seconds", "not measured"],
                                   ["plot-refit", "refit_seconds", "no refit measured"]]) {
      const timed = b.filter((r) => r[key] !== null);
      const ms = timed.map((r) => 1000 * r[key]);
      plot(document.getElementById(id),
           {x: timed.map((r) => r.index), y: ms, kind: "bars", xLabel: "batch",
            yLabel: "milliseconds", yMin: 0, empty: b.length ? none : "no data yet",
            log: logScale(id, ms, true)});
    }
    const kernel = b.filter((r) => r.hyperparameters);
    document.getElementById("figure-lengthscale").hidden = !hasKernel(study) ||
      (!kernel.length && study.hyperparameters === null);
    showHyperparameters(study, kernel);  // the refits need the batches
    const series = lengthscaleSeries(kernel, study.parameter_names);
    const q = kernel.reduce((m, r) => Math.max(m, r.hyperparameters.lengthscale.length), 1);
    document.getElementById("lengthscale-caption").textContent = "kernel lengthscale per batch" +
      (q > series.length ? ` (the ${series.length - 1} shortest of ${q} dimensions, and the `
        + "geometric mean of the others; short: the values vary fast along it)"
        : series.length > 1 ? " (one line per dimension; short: the values vary fast along it)"
        : "");
    document.getElementById("lengthscale-sources").textContent = kernel.length
      ? "lengthscale from: " + sourceRuns(kernel) : "";
    plot(document.getElementById("plot-lengthscale"),  // steps: a batch keeps its lengthscale
         {x: kernel.map((r) => r.index), series, kind: "steps", xLabel: "batch",
          yLabel: "lengthscale", yMin: 0,
          log: logScale("plot-lengthscale", series.flatMap((s) => s.y))});
  };

  for (const box of document.querySelectorAll("input[data-log]")) {  // remembered per plot
    box.checked = localStorage.getItem("bbkb-log-" + box.dataset.log) === "1";
    box.addEventListener("change", () => {
      localStorage.setItem("bbkb-log-" + box.dataset.log, box.checked ? "1" : "0");
      if (study) draw();
    });
  }

  const showStudy = () => {
    document.title = study.name + " - bbkb";
    document.getElementById("study-name").textContent = study.name;
    document.getElementById("study-status").textContent = study.status;
    const c = study.counts;
    document.getElementById("study-facts").textContent = [
      `${study.strategy} (${study.mode}), ${study.direction}`,
      `${study.n_candidates} candidates x ${study.dim}`,
      `${c.completed} completed, ${c.running} running, ${c.pending} pending, ` +
        `${c.failed + c.abandoned} failed`,
      `${study.n_batches} batches, dictionary ${study.dictionary_size}`].join(" \u00b7 ");
    showBest(study);
    showHyperparameters(study, b.filter((r) => r.hyperparameters));
    document.getElementById("config").textContent = JSON.stringify(
      {name: study.name, n_candidates: study.n_candidates, dim: study.dim,
       parameter_names: study.parameter_names, created_at: study.created_at, ...study.spec},
      null, 2);
  };

  // The dispatch is asked for at every poll while it runs or is paused, else when the study
  // changed and at every 5th poll (a dispatch just started has handed out no trial yet).
  const refreshDispatch = async (changed) => {
    const live = dispatch && ["running", "paused"].includes(dispatch.status);
    if (changed || live || dispatchPolls++ % 5 === 0) dispatch = await json(base + "/dispatch");
    showDispatch(dispatch, study);
  };

  // While the dispatch runs, the workers' queue is asked for at every poll (never otherwise):
  // a hint when no worker listens (its jobs wait in Redis: the most common reason a dispatch
  // does not progress) or when Redis does not answer. Without Redis on this server, or when
  // the queue cannot be had, no hint.
  const queue = queueSource();
  const refreshQueue = async () => {
    const hint = document.getElementById("dispatch-hint");
    const state = dispatch && dispatch.status === "running" ? await queue.read() : null;
    const idle = state !== null && state.redis === "ok" && !state.workers.length;
    const lost = state !== null && state.redis === "unreachable";
    hint.hidden = !idle && !lost;
    hint.dataset.reason = idle ? "no-worker" : lost ? "unreachable" : "";
    hint.title = lost ? state.detail || "" : "";
    if (idle) hint.replaceChildren(...noWorkerHint());
    else if (lost) hint.textContent = "Redis unreachable: no trials are sent until it answers";
  };

  const refresh = async () => {
    study = await json(base);
    showStudy();
    const state = JSON.stringify([study.counts, study.n_batches, study.status]);
    await refreshDispatch(state !== seen);
    const queueShown = refreshQueue();  // meanwhile (it never throws)
    if (state !== seen) {
      await Promise.all([refreshPlots(), refreshFailed(), refreshTrials()]);
      seen = state;
    }
    await queueShown;
  };

  for (const select of [filter, order]) {
    select.addEventListener("change", () => {
      Object.assign(pages, {status: filter.value, order: order.value, cursors: [undefined],
                            starts: [0], index: 0});
      refreshTrials().catch((e) => say(e.message, true));
    });
  }
  document.getElementById("page-next").addEventListener("click", () => {
    if (pages.cursors[pages.index + 1] === null) return;
    pages.index += 1;
    refreshTrials().catch((e) => say(e.message, true));
  });
  document.getElementById("page-prev").addEventListener("click", () => {
    if (pages.index === 0) return;
    pages.index -= 1;
    refreshTrials().catch((e) => say(e.message, true));
  });
  document.getElementById("csv").addEventListener("click", async () => {
    try {
      const blob = await (await api(base + "/export")).blob();
      const link = document.createElement("a");
      link.href = URL.createObjectURL(blob);
      link.download = `study-${id}.csv`;
      document.body.appendChild(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 10000);
    } catch (error) {
      if (!(error instanceof AuthNeeded)) say(error.message, true);
    }
  });
  poll(refresh, () => {  // no study to show: no empty plots and tables either
    say(`Study ${id} not found (or it belongs to another owner).`, true);
    for (const section of document.querySelectorAll("main > section")) section.hidden = true;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  for (const table of document.querySelectorAll("table.data")) {  // scrolls on narrow screens
    const box = document.createElement("div");
    box.className = "scroll";
    table.before(box);
    box.appendChild(table);
  }
  const page = document.body.dataset.page;
  if (page === "studies") studiesPage();
  else if (page === "study") studyPage(Number(document.body.dataset.studyId));
});
