"""Every HTTP server stratagym runs sends ``X-Content-Type-Options: nosniff`` and a Content-Security-Policy
(issue 30, bad input): the retrieval server, the WebShop site (whose ``state.json`` returns a purchased
option's text verbatim) and the OpenEnv server (tested in test_server.py). Each server is started and
stopped here, on 127.0.0.1."""

from __future__ import annotations

import json

import httpx

from stratagym.envs.search_qa.index import make_retriever
from stratagym.envs.search_qa.server import create_app as retrieval_app
from stratagym.serving import serve_in_thread
from stratagym.envs.webshop.text_env import build_site
from stratagym.envs.webshop.web import create_app as webshop_app

SCRIPT = "<script>alert(1)</script>"


def test_retrieval_server_sends_nosniff_and_csp_on_every_response():
    srv = serve_in_thread(retrieval_app(make_retriever("bm25s")))
    try:
        for response in (
            httpx.get(srv.url + "/health"),
            httpx.post(srv.url + "/retrieve", json={"queries": [SCRIPT], "topk": 2}),
            httpx.post(srv.url + "/retrieve", json={"queries": SCRIPT}),  # 422
            httpx.get(srv.url + "/no-such-page"),  # 404
            httpx.get(srv.url + "/docs"),  # FastAPI's HTML docs page
        ):
            assert response.headers["x-content-type-options"] == "nosniff", response.url
            assert "default-src 'none'" in response.headers["content-security-policy"], response.url
            assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    finally:
        srv.stop()


def test_webshop_state_json_with_a_script_option_is_nosniff_json():
    app = webshop_app(build_site())
    client = app.test_client()
    r = client.get("/start?task_id=webshop-0")
    assert r.status_code == 303
    sid = r.headers["Location"].split("/s/")[1].strip("/")
    asin = app.extensions["webshop_site"].catalog.goals[0]["asin"]
    bought = client.post(f"/s/{sid}/buy/{asin}", query_string={"q": "x", "page": 1, "opt": json.dumps({"size": SCRIPT})})
    assert bought.status_code == 200
    state = client.get(f"/s/{sid}/state.json")
    assert state.get_json()["purchased"]["options"] == {"size": SCRIPT}  # the data is kept as text...
    assert state.mimetype == "application/json"  # ...served as JSON a browser may not sniff as HTML
    assert state.headers["X-Content-Type-Options"] == "nosniff"
    assert state.headers["Content-Security-Policy"].startswith("default-src 'none'")
    for page in (bought, client.get(f"/s/{sid}/"), client.get("/"), client.get("/s/nosuch/")):
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        csp = page.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp and "frame-ancestors 'none'" in csp
    assert SCRIPT not in bought.get_data(as_text=True)  # and the page itself escapes it
