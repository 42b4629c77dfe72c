// bbkb dashboard: the kernel hyper-parameters of a study (its lengthscale plot's series and
// the table of the current batch's values). Uses plots.js; loaded before dashboard.js.

"use strict";

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

// Why the kernel is on the neighbour floor, and what that says about the data: a kept fit
// shorter than the floor is the data's own choice, bounded (below the floor UCB learns little
// between candidates); fits not kept say the values look like noise; before any fit, or from a
// start on the floor, it is the prior's alone.
function floorReading(hp, batches) {
  if (hp.variance !== null) {
    return "the last kept fit, lengthened, falls below it. The data point shorter still; the "
      + "floor bounds them, as below it UCB learns little between candidates";
  }
  const startedOnFloor = batches[0]?.hyperparameters?.source === "floor";
  const why = hp.fitted_at && !startedOnFloor ? "a fit (not kept) put it below"
    : "the candidates are too sparse for the longer start";
  return `${why}. ` + (hp.fitted_at ? "No fit kept so far (the values look like noise to the "
    + "likelihood): a prior choice" : "A prior choice") + ", not one the data made";
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
  const sources = gssbo ? {
    start: "GSSBO's default values (fewer than 3 observations)",
    fit: "GSSBO's fit at this batch"} : {
    fixed: "the configuration (hyperparameters: fixed)",
    start: "the start: the RMS distance between candidates (no fit kept yet)",
    floor: "the neighbour floor, the shortest that links nearest candidates: "
      + floorReading(hp, batches) + "; if it stays there in 20 or more dimensions, fixed "
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
      {hyperparameters: "fixed", ard: false, normalize: engine.normalize || "zscore", lam: hp.lam,
       kernel});
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
