"""The REST API: signing secrets of a biz type, their validation and their rotation."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from broker.callback import build_request
from tests.unit.api_harness import CALLBACK, NOW, Api, expect, locs
from timer_service.model import BizType, Job, JobState
from timer_service.receiver import InvalidSignature, verify_callback
from timer_service.signing import signing_key

DAY_MS = 86_400_000
JSON = {"Content-Type": "application/json"}
WHSEC = "whsec_" + base64.b64encode(bytes(range(32))).decode()


async def rotate(api: Api, biz_type: str = "orders", **body: Any) -> Any:
    url = f"/v1/biz-types/{biz_type}/secret:rotate"
    return await api.request("POST", url, json=body)


async def stored(api: Api) -> BizType:
    biz = await api.store.biz_types.get_biz_type("orders")
    assert biz is not None
    return biz


def signed_callback(biz: BizType, fired_at: int) -> tuple[bytes, dict[str, str]]:
    job = Job("orders", "o-1", fired_at, "{}", JobState.DISPATCHED, 0, fired_at, 0, 0)
    request = build_request(biz, job, 1, fired_at)
    return request.body, request.headers


def accepts(secret: str, biz: BizType, at: int) -> bool:
    body, headers = signed_callback(biz, at)
    try:
        verify_callback(body, headers, secret, now_ms=at)
    except InvalidSignature:
        return False
    return True


# -- setting a secret -----------------------------------------------------------------------


async def test_a_whsec_secret_is_stored_and_never_shown(api: Api) -> None:
    response = await api.put_biz(signing_secret=WHSEC)

    body = expect(response, 200)
    assert (body["has_signing_secret"], body["signing_secret_rotating_until"]) == (True, None)
    got = await api.request("GET", "/v1/biz-types/orders")
    for text in (response.text, got.text):
        assert WHSEC.removeprefix("whsec_")[:12] not in text, f"secret leaked: {text}"
    assert (await stored(api)).signing_secret == WHSEC


BAD_SECRETS = [
    ("whsec_", "at least 16 bytes"),
    ("whsec_" + base64.b64encode(b"0123456789abcde").decode(), "at least 16 bytes"),
    ("whsec_not base64!", "base64"),
    ("whsec_" + "A" * 33, "base64"),
    ("whsec_" + "ü" * 32, "base64"),
    ("\ud800", "nicode"),  # refused by pydantic before our check
]


@pytest.mark.parametrize(("secret", "message"), BAD_SECRETS)
async def test_an_unusable_secret_is_422_and_says_why(api: Api, secret: str, message: str) -> None:
    before = await api.snapshot()
    put, post = {**CALLBACK, "signing_secret": secret}, {"signing_secret": secret}

    for method, url, body in (
        ("PUT", "/v1/biz-types/orders", put),
        ("POST", "/v1/biz-types/orders/secret:rotate", post),
    ):
        # json.dumps escapes a lone surrogate, which httpx's own encoder cannot send.
        response = await api.request(method, url, content=json.dumps(body), headers=JSON)
        problem = expect(response, 422)
        assert ["body", "signing_secret"] in locs(problem), problem
        assert message in problem["errors"][0]["msg"], problem
    assert await api.snapshot() == before, "a rejected request changed the store"


# -- rotating ------------------------------------------------------------------------------


async def test_rotate_generates_a_secret_shows_it_once_and_keeps_the_old_one_a_day(
    api: Api,
) -> None:
    expect(await api.put_biz(signing_secret="old"), 200)
    api.clock.advance(1000)

    body = expect(await rotate(api), 200)

    new = body.pop("signing_secret")
    assert new.startswith("whsec_") and len(signing_key(new)) == 32, new
    assert body["signing_secret_rotating_until"] == NOW + 1000 + DAY_MS, body
    assert body["has_signing_secret"] is True and body["updated_at"] == NOW + 1000, body
    got = expect(await api.request("GET", "/v1/biz-types/orders"), 200)
    assert got == body, f"expected {body}, got {got}"
    biz = await stored(api)
    assert biz.signing_secrets(NOW + 1000) == (new, "old"), biz
    assert accepts(new, biz, NOW + 1000) and accepts("old", biz, NOW + 1000)

    api.clock.advance(DAY_MS)

    got = expect(await api.request("GET", "/v1/biz-types/orders"), 200)
    assert got["signing_secret_rotating_until"] is None, got
    later = NOW + 1000 + DAY_MS
    assert accepts(new, biz, later) and not accepts("old", biz, later)
    listed = expect(await api.request("GET", "/v1/biz-types"), 200)
    assert listed == {"items": [got]}, listed


async def test_rotate_to_a_given_secret_without_keeping_the_old_one(api: Api) -> None:
    expect(await api.put_biz(signing_secret="old"), 200)

    body = expect(await rotate(api, signing_secret=WHSEC, keep_previous_for_s=0), 200)

    assert (body["signing_secret"], body["signing_secret_rotating_until"]) == (WHSEC, None)
    assert (await stored(api)).signing_secrets(NOW) == (WHSEC,)


async def test_rotate_twice_keeps_only_the_secret_replaced_last(api: Api) -> None:
    expect(await api.put_biz(signing_secret="first"), 200)
    expect(await rotate(api, signing_secret="second", keep_previous_for_s=60), 200)
    api.clock.advance(10_000)

    expect(await rotate(api, signing_secret=WHSEC, keep_previous_for_s=60), 200)

    biz = await stored(api)
    assert biz.signing_secrets(NOW + 10_000) == (WHSEC, "second"), biz
    assert biz.previous_secret_expires_at == NOW + 70_000, biz


async def test_rotate_gives_an_unsigned_biz_type_its_first_secret(api: Api) -> None:
    response = await api.request("POST", "/v1/biz-types/orders/secret:rotate")  # no body

    body = expect(response, 200)
    assert body["has_signing_secret"] and body["signing_secret_rotating_until"] is None, body
    assert (await stored(api)).signing_secrets(NOW) == (body["signing_secret"],)


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"keep_previous_for_s": -1}, ["body", "keep_previous_for_s"]),
        ({"keep_previous_for_s": 30 * 86_400 + 1}, ["body", "keep_previous_for_s"]),
        ({"keep_previous_for_s": "60"}, ["body", "keep_previous_for_s"]),
        ({"keep_previous_for_s": 1.5}, ["body", "keep_previous_for_s"]),
        ({"signing_secret": 42}, ["body", "signing_secret"]),
        ({"signing_secret": ""}, ["body", "signing_secret"]),
        ([], ["body"]),
    ],
)
async def test_rotate_rejects_a_bad_body(api: Api, body: Any, loc: list[Any]) -> None:
    before = await api.snapshot()
    url = "/v1/biz-types/orders/secret:rotate"

    problem = expect(await api.request("POST", url, json=body), 422)

    assert loc in locs(problem), f"expected an error at {loc}, got {locs(problem)}"
    assert await api.snapshot() == before, "a rejected request changed the store"


async def test_rotate_an_unknown_biz_type_is_404_and_not_json_is_400(api: Api) -> None:
    expect(await rotate(api, "nope"), 404)
    url = "/v1/biz-types/orders/secret:rotate"
    expect(await api.request("POST", url, content=b"{not json", headers=JSON), 400)


# -- a PUT during a rotation ------------------------------------------------------------------


async def test_a_put_with_the_same_secret_keeps_the_rotation_going(api: Api) -> None:
    expect(await api.put_biz(signing_secret="old"), 200)
    new = expect(await rotate(api, keep_previous_for_s=60), 200)["signing_secret"]

    body = expect(await api.put_biz(signing_secret=new, burst=5), 200)

    assert body["signing_secret_rotating_until"] == NOW + 60_000, body
    assert (await stored(api)).signing_secrets(NOW) == (new, "old")


@pytest.mark.parametrize("config", [{"signing_secret": "other"}, {}])
async def test_a_put_with_another_secret_or_none_ends_the_rotation(
    api: Api, config: dict[str, Any]
) -> None:
    expect(await api.put_biz(signing_secret="old"), 200)
    expect(await rotate(api, keep_previous_for_s=60), 200)

    body = expect(await api.put_biz(**config), 200)

    assert body["signing_secret_rotating_until"] is None, body
    biz = await stored(api)
    assert biz.previous_signing_secret is None, biz
    assert biz.signing_secrets(NOW) == tuple(config.values()), biz


async def test_the_openapi_document_describes_the_rotation(api: Api) -> None:
    schema = expect(await api.request("GET", "/openapi.json"), 200)

    operation = schema["paths"]["/v1/biz-types/{biz_type}/secret:rotate"]["post"]
    assert set(operation["responses"]) >= {"200", "400", "404", "422"}, operation["responses"]
    rotate_in = schema["components"]["schemas"]["SecretRotateIn"]["properties"]
    assert set(rotate_in) == {"signing_secret", "keep_previous_for_s"}, rotate_in
    out = schema["components"]["schemas"]["BizTypeOut"]["properties"]
    assert "signing_secret_rotating_until" in out and "signing_secret" not in out, out
