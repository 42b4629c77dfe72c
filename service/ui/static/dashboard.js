// bbkb dashboard: polls the JSON API under /v1 and draws SVG. No dependencies, no build step.
// Study data only ever enters the page through textContent and SVG attributes (never as HTML).
// Loaded after plots.js (formatting, SVG plots) and kernel.js (the kernel hyper-parameters),
// whose functions it calls; it starts the page.
"use strict";

const KEY = "bbkb-api-key";
const query = new URLSearchParams(location.search);
const POLL_MS = Math.max(200, Number(query.get("poll")) || 2000);
const PAGE_SIZE = Math.min(1000, Math.max(1, Number(query.get("page_size")) || 50));
// Rows of the history per request (the server's default page, at most its 200,000).
const HISTORY_PAGE = Math.min(200000, Math.max(1,
  Math.floor(Number(query.get("history_page"))) || 50000));
// Batches per request (the server's default page, at most its 50,000).
const BATCH_PAGE = Math.min(50000, Math.max(1,
  Math.floor(Number(query.get("batch_page"))) || 10000));

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
  document.getElementById("account").hidden = true;  // not the refused key's owner
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
      } else if (error instanceof TypeError) {  // fetch's network error: no answer at all
        say(`The server does not answer (${error.message}); trying again every ` +
            `${POLL_MS / 1000} s.`, true);
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
    const account = json("/v1/me").catch(() => null);  // (a server without the route: null)
    const found = [];  // every page (keyset pagination: follow next_after)
    for (let after = 0; after !== null;) {
      const page = await json("/v1/summaries?limit=1000&after=" + after);
      found.push(...page.studies);
      after = page.next_after;
    }
    rows = found;
    render();
    showQueue(await queueState);
    showAccount(await account);
  });
}

// The key's owner and scope, and the owner's quotas where the server sets them (GET /v1/me).
function showAccount(account) {
  const box = document.getElementById("account");
  box.hidden = !account;
  if (!account) return;
  const parts = [account.owner + (account.scope === "worker"
    ? " · worker key (reads, asks and reports only)" : "")];
  if (account.max_studies !== null) parts.push(`${account.studies} of ${account.max_studies} studies`);
  if (account.max_parallelism !== null) {
    parts.push(`parallelism ${account.parallelism} of ${account.max_parallelism} in use`);
  }
  box.textContent = parts.join(" · ");
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
      // a completed trial keeps the reason an earlier attempt failed with: not an error now
      if (t.status === "completed" && t.error) cell(row, "earlier attempt: " + t.error, "muted");
      else cell(row, t.error, "error");
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
      cell(row, paramsText(t.parameters), "params");
      cell(row, t.error || "(no reason given)", "error");
    }
    const n = study.counts.failed + study.counts.abandoned;
    document.getElementById("failed-count").textContent =
      n > trials.length ? `(${n}; the first ${trials.length} shown)` : `(${n})`;
  };

  // Completed trials in completion order, and the batches in index order: only the rows not
  // seen yet are fetched (and the batches from the first still open on, which may change).
  // The history and the batches come in pages: a first load reads them all before drawing.
  const history = {t: [], value: [], elapsed: [], noiseless: null, optimum: null};
  const historyPage = () => json(
    `${base}/history?offset=${history.t.length}&limit=${HISTORY_PAGE}`);
  const appendHistory = (more) => {  // whether a further page follows
    if (more.offset !== history.t.length) return false;
    for (const k of ["t", "value", "elapsed"]) history[k] = history[k].concat(more[k]);
    if (more.noiseless !== null) {
      history.noiseless = (history.noiseless || []).concat(more.noiseless);
    }
    history.optimum = more.optimum;
    return more.t.length > 0 && more.next_offset != null;  // (null, or a server without it)
  };
  const batchPages = async (after) => {  // every page of the batches after ``after``
    const page = await json(`${base}/batches?after=${after}&limit=${BATCH_PAGE}`);
    const rest = page.next_after == null || !page.batches.length ? []
      : await batchPages(page.next_after);
    return page.batches.concat(rest);
  };
  let b = [];
  const refreshPlots = async () => {
    const open = b.findIndex((r) => r.closed_at === null);
    const keep = open < 0 ? b.length : open;
    const after = keep ? b[keep - 1].index : -1;
    const [more, batches] = await Promise.all([historyPage(), batchPages(after)]);
    b = b.slice(0, keep).concat(batches);
    for (let next = appendHistory(more); next;) next = appendHistory(await historyPage());
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

  // One trials refresh at a time, in the order asked: a second "next" while a page loaded
  // found no cursor for it yet and showed the newest trials under the fourth page's label.
  // ``change`` runs when its turn comes (false: nothing to show, e.g. no next page).
  let trialsTurn = Promise.resolve();
  const showTrials = (change = () => true) => {
    const run = trialsTurn.then(() => (change() === false ? undefined : refreshTrials()));
    trialsTurn = run.catch(() => {});
    return run;
  };

  const refresh = async () => {
    study = await json(base);
    showStudy();
    const state = JSON.stringify([study.counts, study.n_batches, study.status]);
    await refreshDispatch(state !== seen);
    const queueShown = refreshQueue();  // meanwhile (it never throws)
    if (state !== seen) {
      await Promise.all([refreshPlots(), refreshFailed(), showTrials()]);
      seen = state;
    }
    await queueShown;
  };

  for (const select of [filter, order]) {
    select.addEventListener("change", () => {
      showTrials(() => {
        Object.assign(pages, {status: filter.value, order: order.value, cursors: [undefined],
                              starts: [0], index: 0});
      }).catch((e) => say(e.message, true));
    });
  }
  document.getElementById("page-next").addEventListener("click", () => {
    showTrials(() => {
      if (pages.cursors[pages.index + 1] === null) return false;
      pages.index += 1;
    }).catch((e) => say(e.message, true));
  });
  document.getElementById("page-prev").addEventListener("click", () => {
    showTrials(() => {
      if (pages.index === 0) return false;
      pages.index -= 1;
    }).catch((e) => say(e.message, true));
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
