"""Servers against hostile request bodies (issue 15 item 8, issue 13 item 1): every request gets a
response that is valid JSON or HTML, never a 500; an empty batch is answered like Search-R1.

Why the earlier tests missed these: ``tests/search_qa/test_server.py`` sent bodies through httpx's
``json=``, which cannot produce ``NaN``, ``1e400`` or a lone surrogate (it encodes strictly), so the
paths where pydantic's error echoes such an input were never reached; and it pinned the 422 for an
empty ``queries`` list as intended behaviour. The WebShop site tests built every URL with
``view_url``, which only ever writes well-formed options.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi")
pytest.importorskip("flask")

from fastapi.testclient import TestClient  # noqa: E402

from stratagym.envs.search_qa.index import make_retriever  # noqa: E402
from stratagym.envs.search_qa.server import ServerLimits, create_app  # noqa: E402


@pytest.fixture(scope="module")
def retrieval():
    app = create_app(make_retriever("bm25s"), ServerLimits(max_queries=16, max_query_chars=200, max_topk=10))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def _post(client, raw: str | bytes):
    return client.post("/retrieve", content=raw if isinstance(raw, bytes) else raw.encode("utf-8"),
                       headers={"content-type": "application/json"})


def test_empty_batch_is_an_empty_result_like_search_r1(retrieval):
    """Search-R1's server answers ``{"queries": []}`` with ``{"result": []}``: in
    ``search_r1/search/retrieval_server.py`` (PeterGriffinJin/Search-R1 @ a14dc3a) ``QueryRequest``
    (line 318) takes any ``List[str]``, ``retrieve_endpoint`` (line 327) calls ``batch_search``, whose
    loop over query batches (line 249) runs zero times, and line 358 returns ``{"result": resp}`` with
    ``resp = []`` (line 348). Its client posts such a request whenever no rollout of a batch searched
    (``search_r1/llm_agent/generation.py`` lines 446-458, ``return_scores: True``) and reads
    ``['result']``, so a 422 here crashed Search-R1's trainer with ``KeyError: 'result'``."""
    for body in ({"queries": [], "topk": 3, "return_scores": True}, {"queries": []}, {"queries": [], "return_scores": False}):
        r = retrieval.post("/retrieve", json=body)
        assert r.status_code == 200 and r.json() == {"result": []}


@pytest.mark.parametrize("raw, field", [
    ('{"queries": ["a"], "topk": NaN}', "topk"),
    ('{"queries": ["a"], "topk": Infinity}', "topk"),
    ('{"queries": ["a"], "topk": 1e400}', "topk"),
    ('{"queries": ["a"], "topk": -1e400}', "topk"),
    ('{"queries": ["a"], "return_scores": NaN}', "return_scores"),
    ('{"queries": ["\\ud800"]}', "queries"),
    ('{"queries": ["ok", "x\\udfff y"]}', "queries"),
    ('{"queries": [NaN]}', "queries"),
    ('{"queries": {"\\ud800": 1}}', "queries"),
    ('NaN', ""),
    ('"\\ud800"', ""),
])
def test_non_finite_numbers_and_surrogates_get_422_not_500(retrieval, raw, field):
    """These were 500s: pydantic's error echoed the input, which then failed JSON encoding."""
    r = _post(retrieval, raw)
    assert r.status_code == 422, r.text
    detail = json.loads(r.content.decode("utf-8"))["detail"]
    assert detail and all(set(d) == {"loc", "msg", "type"} for d in detail)
    assert any(field in map(str, d["loc"]) for d in detail) or not field


def test_a_valid_request_still_searches(retrieval):
    r = retrieval.post("/retrieve", json={"queries": ["Kubae river"], "topk": 2, "return_scores": True})
    assert r.status_code == 200 and len(r.json()["result"][0]) == 2


# ---- fuzz: any JSON-ish body, hostile values included -----------------------------------------------

_hostile_text = st.one_of(st.text(max_size=30), st.sampled_from(["\ud800", "a\udfffb", "\x00", "[/]", "$\\x$", "x" * 300]))
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
              st.floats(allow_nan=True, allow_infinity=True), _hostile_text),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_hostile_text, inner, max_size=4)),
    max_leaves=12,
)
_bodies = st.one_of(
    _json,
    st.fixed_dictionaries({"queries": st.lists(_hostile_text, max_size=20)},
                          optional={"topk": _json, "return_scores": _json, "extra": _json}),
    st.fixed_dictionaries({"queries": _json, "topk": _json}),
)


def _dump(body) -> bytes:
    # Python's json writes NaN/Infinity and \\udXXX escapes: exactly what a hostile client can send
    return json.dumps(body, allow_nan=True).encode("ascii")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=_bodies)
def test_fuzz_retrieval_request_bodies_never_500(retrieval, body):
    r = _post(retrieval, _dump(body))
    assert r.status_code in (200, 422), (r.status_code, r.text[:300])
    payload = json.loads(r.content.decode("utf-8"))  # always valid UTF-8 JSON
    if r.status_code == 200:
        assert len(payload["result"]) == len(body["queries"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=st.binary(max_size=64))
def test_fuzz_retrieval_raw_bytes_never_500(retrieval, raw):
    r = _post(retrieval, raw)
    assert r.status_code == 200 or 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    json.loads(r.content.decode("utf-8"))


# ---- the WebShop site --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shop():
    from stratagym.envs.webshop.text_env import build_site
    from stratagym.envs.webshop.web import create_app as create_shop

    app = create_shop(build_site())
    app.testing = True
    client = app.test_client()
    r = client.get("/start?task_id=webshop-0")
    sid = r.headers["Location"].split("/s/")[1].strip("/")
    asin = next(iter(app.extensions["webshop_site"].catalog.by_asin))
    return client, sid, asin


@pytest.mark.parametrize("opt", ['{"size":"\\ud800"}', '{"\\udfff":"large"}', '{"a":"ok","b":"x\\udc80"}'])
def test_webshop_option_with_a_surrogate_is_400_on_item_sub_and_buy(shop, opt):
    """``?opt={"size":"\\ud800"}`` was a 500 on item and buy pages (the page could not be encoded)."""
    client, sid, asin = shop
    for method, url in (("get", f"/s/{sid}/item/{asin}"), ("get", f"/s/{sid}/item/{asin}/Description"),
                        ("post", f"/s/{sid}/buy/{asin}")):
        r = getattr(client, method)(url, query_string={"q": "x", "page": "1", "opt": opt})
        assert r.status_code == 400, (url, r.status_code)
        assert b"not valid Unicode text" in r.data
    assert not client.get(f"/s/{sid}/state.json").get_json()["done"]  # the bad buy bought nothing


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(opt=st.one_of(_json.map(lambda v: json.dumps(v, allow_nan=True)), st.text(max_size=40)),
       q=st.text(max_size=20), page=st.text(max_size=8))
def test_fuzz_webshop_item_parameters_never_500(shop, opt, q, page):
    client, sid, asin = shop
    r = client.get(f"/s/{sid}/item/{asin}", query_string={"q": q, "page": page, "opt": opt})
    assert r.status_code in (200, 400), r.status_code
    r.data.decode("utf-8")
