// bbkb dashboard: value formatting and SVG plots (loaded before kernel.js and dashboard.js;
// the three share the page's global scope). Text enters only through textContent and SVG
// attributes, never as HTML.

"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

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
