"""The dashboard's pages under /ui: HTML shells plus the scripts that poll the JSON API.

The pages hold no study data: the browser fetches it from /v1 with the API key the user typed
(kept in sessionStorage, sent as a Bearer header), so the HTML itself needs no authentication.
"""

from __future__ import annotations

from html import escape

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

from ...errors import NotFound
from ...ui import STATIC_DIR
from ..deps import MAX_STUDY_ID

router = APIRouter(prefix="/ui", include_in_schema=False)

#: The static files, by name; the scripts in the order the pages load them (one global scope).
SCRIPTS = ("plots.js", "kernel.js", "dashboard.js")
ASSETS = {**dict.fromkeys(SCRIPTS, "text/javascript"), "dashboard.css": "text/css"}

LAYOUT = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} - bbkb</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/ui/static/dashboard.css">
{scripts}
</head>
<body data-page="{page}"{attributes}>
<header>
  <a class="brand" href="/ui">bbkb dashboard</a>
  <span id="poll-status" class="muted"></span>
  <span id="account" class="muted" hidden></span>
  <form id="key-form" hidden>
    <label for="key-input">API key</label>
    <input id="key-input" type="password" autocomplete="off" placeholder="bbkb_...">
    <button type="submit">Use key</button>
  </form>
  <button id="key-forget" type="button" hidden>Forget key</button>
</header>
<p id="message" class="message" hidden></p>
<main>
{body}
</main>
</body>
</html>
"""

STUDIES_BODY = """<h1>Studies</h1>
<div id="queue" class="queue" hidden>
  <p><span id="queue-text"></span> <small id="queue-detail" class="muted"></small></p>
  <details id="queue-workers-box" hidden><summary id="queue-workers-summary"></summary>
    <table id="queue-workers" class="data">
      <thead><tr><th>worker</th><th>state</th><th>current job</th><th>last heartbeat</th></tr>
      </thead>
      <tbody></tbody>
    </table></details>
</div>
<div class="toolbar">
  <label for="studies-filter">find</label>
  <input id="studies-filter" type="search" placeholder="name, strategy or status"
    autocomplete="off">
  <span id="studies-shown" class="muted"></span>
</div>
<table id="studies" class="data">
<thead><tr>
  <th data-sort="name">name</th><th data-sort="strategy">strategy</th>
  <th data-sort="status">status</th><th data-sort="completed" class="num">evaluations</th>
  <th data-sort="failed" class="num">failed</th>
  <th data-sort="best_value" class="num"
    title="the best value observed so far (a measured value, not a model estimate)">best so far
  </th>
  <th data-sort="last_activity">last activity</th>
</tr></thead>
<tbody></tbody>
</table>
<p id="studies-empty" class="muted" hidden>No studies yet.</p>
<p id="studies-none-match" class="muted" hidden>No study matches.</p>
"""

STUDY_BODY = """<h1><span id="study-name">study {study_id}</span>
  <span id="study-status" class="badge"></span></h1>
<p id="study-facts" class="muted"></p>
<p id="study-best" class="best"></p>
<p id="dispatch" class="dispatch" hidden><span id="dispatch-text"></span>
  <progress id="dispatch-progress" max="1" value="0"></progress>
  <span id="dispatch-hint" class="warn" hidden></span></p>
<section class="plots">
  <figure><figcaption><span>best value observed so far vs evaluations</span>{log_best}
    </figcaption>
    <svg id="plot-best" viewBox="0 0 480 240"></svg></figure>
  <figure id="figure-regret" hidden>
    <figcaption><span id="regret-caption">simple regret vs evaluations</span>{log_regret}
    </figcaption>
    <svg id="plot-regret" viewBox="0 0 480 240"></svg></figure>
  <figure><figcaption><span>every observed value over time</span>{log_values}</figcaption>
    <svg id="plot-values" viewBox="0 0 480 240"></svg></figure>
  <figure><figcaption>batch size per batch</figcaption>
    <svg id="plot-batch-size" viewBox="0 0 480 240"></svg></figure>
  <figure><figcaption>dictionary size per batch</figcaption>
    <svg id="plot-dictionary" viewBox="0 0 480 240"></svg></figure>
  <figure><figcaption><span>time per resparsification: dictionary resampling (ms)</span>
    {log_resparsify}</figcaption>
    <svg id="plot-resparsify" viewBox="0 0 480 240"></svg></figure>
  <figure><figcaption><span>time to open a batch: resampling + kernel refit + posterior (ms)
    </span>{log_open}</figcaption>
    <svg id="plot-open" viewBox="0 0 480 240"></svg></figure>
  <figure><figcaption><span>time per kernel refit, part of the opening (ms)</span>
    {log_refit}</figcaption>
    <svg id="plot-refit" viewBox="0 0 480 240"></svg></figure>
  <figure id="figure-lengthscale" hidden>
    <figcaption><span id="lengthscale-caption">kernel lengthscale per batch</span>
    {log_lengthscale}</figcaption>
    <svg id="plot-lengthscale" viewBox="0 0 480 240"></svg>
    <p id="lengthscale-sources" class="muted small"></p></figure>
</section>
<section>
  <h2>Configuration</h2>
  <div class="config">
    <div><h3>Kernel hyper-parameters (current batch)</h3>
      <table id="hyperparameters" class="data" hidden><tbody></tbody></table>
      <p id="hyperparameters-none" class="muted">none yet</p></div>
    <pre id="config"></pre>
  </div>
</section>
<section>
  <h2>Failed trials <span id="failed-count" class="muted"></span></h2>
  <table id="failed" class="data">
    <thead><tr><th class="num">t</th><th>status</th><th class="num">attempts</th><th>worker</th>
      <th>parameters</th><th>error</th></tr></thead>
    <tbody></tbody>
  </table>
</section>
<section>
  <h2>Trials</h2>
  <div class="toolbar">
    <label for="status-filter">status</label>
    <select id="status-filter">
      <option value="">all</option><option>pending</option><option>running</option>
      <option>completed</option><option>failed</option><option>abandoned</option>
    </select>
    <label for="trials-order">order</label>
    <select id="trials-order">
      <option value="newest">newest first</option><option value="oldest">oldest first</option>
    </select>
    <button id="page-prev" type="button">&larr; previous</button>
    <button id="page-next" type="button">next &rarr;</button>
    <span id="page-info" class="muted"></span>
    <button id="csv" type="button" class="right">Download CSV</button>
  </div>
  <table id="trials" class="data">
    <thead><tr><th class="num">t</th><th>status</th><th class="num">value</th>
      <th class="num">batch</th><th class="num">attempt</th><th>worker</th><th>parameters</th>
      <th>completed</th><th>error</th></tr></thead>
    <tbody></tbody>
  </table>
</section>
"""


#: The plots with a log-scale switch (values that may span orders of magnitude).
LOG_PLOTS = ("best", "regret", "values", "resparsify", "open", "refit", "lengthscale")


_SCRIPT_TAGS = "\n".join(f'<script src="/ui/static/{name}" defer></script>' for name in SCRIPTS)


def _log_switch(plot: str) -> str:
    return (f'<label class="log" title="logarithmic y axis"><input type="checkbox" '
            f'data-log="plot-{plot}"> log</label>')


#: The pages' security headers: their own scripts, styles and API only (no inline code, so an
#: injected name could not run even if it escaped escaping; images also ``data:``, the empty
#: icon), never framed (clickjacking), and no content sniffing.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                               "base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def _page(title: str, page: str, body: str, status_code: int = 200, **data: str) -> HTMLResponse:
    attributes = "".join(f' data-{k.replace("_", "-")}="{escape(v)}"' for k, v in data.items())
    return HTMLResponse(LAYOUT.format(title=escape(title), page=page, attributes=attributes,
                                      scripts=_SCRIPT_TAGS, body=body),
                        status_code=status_code, headers=SECURITY_HEADERS)


@router.get("")
def ui_root() -> RedirectResponse:
    return RedirectResponse("/ui/")


@router.get("/")
def studies_page() -> HTMLResponse:
    return _page("Studies", "studies", STUDIES_BODY)


@router.get("/studies/{study_id}")
def study_page(study_id: str) -> HTMLResponse:
    """A study's page; a path that is no study id answers a page saying so (a person typed or
    pasted it: the API's 422 JSON would be no help), 404."""
    if not (study_id.isascii() and study_id.isdigit() and 1 <= int(study_id) <= MAX_STUDY_ID):
        body = (f'<section><h1>No study {escape(study_id)!s}</h1><p>Study ids are whole '
                f'numbers from 1. <a href="/ui/">All studies</a></p></section>')
        return _page("No such study", "missing", body, status_code=404)
    number = int(study_id)
    switches = {f"log_{plot}": _log_switch(plot) for plot in LOG_PLOTS}
    return _page(f"Study {number}", "study", STUDY_BODY.format(study_id=number, **switches),
                 study_id=str(number))


@router.get("/static/{name}")
def asset(name: str) -> FileResponse:
    if name not in ASSETS:
        raise NotFound(f"no asset {name}", field="name")
    return FileResponse(STATIC_DIR / name, media_type=ASSETS[name],
                        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})
