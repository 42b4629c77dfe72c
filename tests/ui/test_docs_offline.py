"""/docs and /redoc on a network with no way out: Swagger UI and ReDoc come from the server
itself (fastapi-offline's copies), not from a CDN. A real chromium whose every request to
another host is refused renders every operation of the API."""

from __future__ import annotations

from urllib.parse import urlsplit


def test_docs_render_every_operation_without_a_cdn(server_factory, tmp_path, page):
    url = f"sqlite:///{tmp_path / 'bbkb.db'}"
    server = server_factory({"BBKB_DATABASE_URL": url, "BBKB_AUTH": "keys",
                             "BBKB_DATA_DIR": str(tmp_path)})
    own, elsewhere = urlsplit(server.url).netloc, []

    def only_the_server(route) -> None:  # type: ignore[no-untyped-def]
        if urlsplit(route.request.url).netloc == own:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_server)
    page.goto(f"{server.url}/docs")
    page.wait_for_selector(".opblock")  # Swagger UI rendered the schema's operations
    operations = page.eval_on_selector_all(".opblock-summary-path", "els => els.length")
    assert operations >= 30, operations
    assert page.locator("button.authorize").count() == 1  # the Bearer scheme, declared
    assert elsewhere == [], elsewhere  # nothing was asked of another host
    page.goto(f"{server.url}/redoc")
    page.wait_for_selector("[data-section-id^='operation/']")  # ReDoc, too
    # but for its footer's "powered by" logo, an image whose absence changes nothing
    assert all(u.endswith(".svg") for u in elsewhere), elsewhere
