"""The REST API: `PATCH /v1/biz-types/{biz_type}`, a JSON Merge Patch of the stored
config that keeps what it does not name (the signing secret above all)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.unit.api_harness import CALLBACK, Api, expect, locs
from timer_service.model import BizType

BIZ = "/v1/biz-types/orders"
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}
WHSEC = "whsec_" + base64.b64encode(bytes(range(32))).decode()
OTHER_WHSEC = "whsec_" + base64.b64encode(bytes(range(1, 33))).decode()
LIMITED = {
    "signing_secret": WHSEC,
    "rate_limit_per_s": 5.0,
    "burst": 3,
    "max_concurrency": 4,
    "timeout_ms": 2000,
    "retry": {
        "max_attempts": 4,
        "initial_backoff_ms": 50,
        "max_backoff_ms": 900,
        "multiplier": 3.0,
    },
    "registration_rate_per_s": 20.0,
}


async def patch(api: Api, body: Any, name: str = "orders", **headers: str) -> Any:
    return await api.request(
        "PATCH", f"/v1/biz-types/{name}", json=body, headers={**MERGE_PATCH, **headers}
    )


async def stored(api: Api) -> BizType:
    biz = await api.store.biz_types.get_biz_type("orders")
    assert biz is not None, "orders is gone"
    return biz


@pytest.fixture
async def signed(api: Api) -> Api:
    expect(await api.put_biz(**LIMITED), 200)
    return api


async def test_pausing_keeps_the_secret_and_every_limit(signed: Api) -> None:
    before = await stored(signed)

    body = expect(await patch(signed, {"paused": True}), 200)

    after = await stored(signed)
    assert after.paused and body["paused"], body
    assert body["has_signing_secret"] is True, body
    assert "signing_secret" not in body and WHSEC[6:20] not in str(body), body
    unchanged = ("signing_secret", "rate_limit_per_s", "burst", "max_concurrency", "timeout_ms")
    for name in (*unchanged, "retry", "registration_rate_per_s", "registration_burst"):
        assert getattr(after, name) == getattr(before, name), f"{name} changed: {after}"
    assert after.updated_at > before.updated_at, "a PATCH must name a new version"
    assert after.created_at == before.created_at

    resumed = expect(await patch(signed, {"paused": False}), 200)
    assert (resumed["paused"], resumed["has_signing_secret"], resumed["rate_limit_per_s"]) == (
        False, True, 5.0,
    )  # fmt: skip
    assert (await stored(signed)).signing_secret == WHSEC


async def test_the_answer_is_what_a_get_shows_with_its_etag(signed: Api) -> None:
    response = await patch(signed, {"burst": 7})

    body = expect(response, 200)
    got = await signed.request("GET", BIZ)
    assert body == got.json(), f"PATCH answered {body}, GET shows {got.json()}"
    assert response.headers["etag"] == got.headers["etag"]


@pytest.mark.parametrize("content_type", ["application/merge-patch+json", "application/json"])
async def test_both_media_types_are_merge_patches(signed: Api, content_type: str) -> None:
    response = await signed.request(
        "PATCH", BIZ, content=b'{"timeout_ms": 3000}', headers={"Content-Type": content_type}
    )

    assert expect(response, 200)["timeout_ms"] == 3000
    assert (await stored(signed)).burst == 3


async def test_null_resets_a_field_to_its_default(signed: Api) -> None:
    body = expect(await patch(signed, {"rate_limit_per_s": None, "burst": None}), 200)

    assert (body["rate_limit_per_s"], body["burst"]) == (None, 1), body
    assert body["max_concurrency"] == 4, "a field the patch does not name must stay"


async def test_retry_merges_member_by_member(signed: Api) -> None:
    body = expect(await patch(signed, {"retry": {"max_attempts": 9}}), 200)

    expected = {**LIMITED["retry"], "max_attempts": 9}
    assert body["retry"] == expected, body

    reset = expect(await patch(signed, {"retry": {"multiplier": None}}), 200)
    assert reset["retry"] == {**expected, "multiplier": 2.0}, reset
    defaults = expect(await patch(signed, {"retry": None}), 200)
    assert defaults["retry"]["max_attempts"] == 10, defaults


async def test_the_secret_is_replaced_or_removed_only_when_named(signed: Api) -> None:
    expect(await patch(signed, {"signing_secret": OTHER_WHSEC}), 200)
    assert (await stored(signed)).signing_secret == OTHER_WHSEC

    body = expect(await patch(signed, {"signing_secret": None}), 200)
    assert body["has_signing_secret"] is False
    assert (await stored(signed)).signing_secret is None


async def test_a_rotation_in_progress_goes_on_across_a_pause(signed: Api) -> None:
    url = "/v1/biz-types/orders/secret:rotate"
    rotated = expect(await signed.request("POST", url, json={"keep_previous_for_s": 600}), 200)

    body = expect(await patch(signed, {"paused": True}), 200)

    assert body["signing_secret_rotating_until"] == rotated["signing_secret_rotating_until"]
    after = await stored(signed)
    assert (after.signing_secret, after.previous_signing_secret) == (
        rotated["signing_secret"], WHSEC,
    )  # fmt: skip


async def test_an_unknown_biz_type_is_404_and_creates_nothing(api: Api) -> None:
    expect(await patch(api, {"paused": True}, name="nobody"), 404)

    assert await api.store.biz_types.get_biz_type("nobody") is None


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"burst": 0}, ["body", "burst"]),
        ({"callback_url": None}, ["body", "callback_url"]),
        ({"callback_url": "ftp://x/"}, ["body", "callback_url"]),
        ({"retry": {"max_attempts": 0}}, ["body", "retry", "max_attempts"]),
        ({"retry": 5}, ["body", "retry"]),
        ({"paused": "yes"}, ["body", "paused"]),
        ({"pasued": True}, ["body", "pasued"]),
        ({"signing_secret": ""}, ["body", "signing_secret"]),
    ],
)
async def test_an_invalid_result_is_422_and_changes_nothing(
    signed: Api, body: dict[str, Any], loc: list[Any]
) -> None:
    before = await signed.snapshot()
    audit_before = await signed.request("GET", "/v1/audit")

    problem = expect(await patch(signed, body), 422)

    assert loc in locs(problem), f"expected an error at {loc}: {problem}"
    assert await signed.snapshot() == before
    assert (await stored(signed)).signing_secret == WHSEC
    assert (await signed.request("GET", "/v1/audit")).json() == audit_before.json()


@pytest.mark.parametrize("raw", [b"{", b"not json", b'{"paused": NaN}'])
async def test_a_body_that_is_not_json_is_400(signed: Api, raw: bytes) -> None:
    before = await signed.snapshot()

    expect(await signed.request("PATCH", BIZ, content=raw, headers=MERGE_PATCH), 400)

    assert await signed.snapshot() == before


@pytest.mark.parametrize("raw", [b"[]", b'"paused"', b"1", b"null"])
async def test_a_patch_that_is_not_an_object_is_422(signed: Api, raw: bytes) -> None:
    before = await signed.snapshot()

    problem = expect(await signed.request("PATCH", BIZ, content=raw, headers=MERGE_PATCH), 422)

    assert locs(problem) == [["body"]], problem
    assert await signed.snapshot() == before


async def test_a_patch_is_recorded_in_the_audit_log(signed: Api) -> None:
    expect(await patch(signed, {"paused": True, "burst": 2}), 200)

    entries = expect(await signed.request("GET", "/v1/audit?action=biz_type.patch"), 200)
    [entry] = entries["items"]
    assert entry["biz_type"] == "orders", entry
    assert entry["detail"] == {"fields": ["burst", "paused"], "paused": True, "was_paused": False}
    assert WHSEC[6:20] not in str(entry)


async def test_if_match_patches_only_the_version_read(signed: Api) -> None:
    stale = (await signed.request("GET", BIZ)).headers["etag"]
    expect(await patch(signed, {"burst": 2}), 200)

    expect(await patch(signed, {"paused": True}, **{"If-Match": stale}), 412)

    assert not (await stored(signed)).paused
    current = (await signed.request("GET", BIZ)).headers["etag"]
    expect(await patch(signed, {"paused": True}, **{"If-Match": current}), 200)


def interleave_writes(api: Api, monkeypatch: pytest.MonkeyPatch, times: int) -> None:
    """Another writer's PUT lands between each of the next `times` reads of orders and
    the write that follows them: the read-modify-write race a PATCH must not lose."""
    biz_types = api.store.biz_types
    read = biz_types.get_biz_type
    left = [times]

    async def read_then_race(name: str) -> BizType | None:
        found = await read(name)
        if left[0] > 0 and found is not None:
            left[0] -= 1
            rival = BizType(
                name, "http://127.0.0.1:9000/rival", signing_secret=found.signing_secret,
                burst=found.burst + 10, created_at=found.created_at,
                updated_at=found.updated_at + 1,
            )  # fmt: skip
            await biz_types.put_biz_type(rival)
        return found

    monkeypatch.setattr(biz_types, "get_biz_type", read_then_race)


async def test_a_patch_that_loses_a_race_applies_itself_over_the_winner(
    signed: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    interleave_writes(signed, monkeypatch, times=1)

    body = expect(await patch(signed, {"paused": True}), 200)

    after = await stored(signed)
    assert (after.paused, after.callback_url, after.burst) == (
        True, "http://127.0.0.1:9000/rival", 13,
    ), f"the rival's write was undone or the patch lost: {after}"  # fmt: skip
    assert body["paused"] is True


async def test_a_patch_that_loses_twice_is_409_and_changes_nothing(
    signed: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    interleave_writes(signed, monkeypatch, times=2)

    problem = expect(await patch(signed, {"paused": True}), 409)

    assert "nothing was changed" in problem["detail"], problem
    after = await stored(signed)
    assert not after.paused, f"a refused PATCH changed the biz type: {after}"
    assert after.burst == 23, "the rivals' writes must stand"


async def test_a_new_callback_url_is_checked_against_the_target_policy(make_api: Any) -> None:
    api = await make_api(callback_allow_private=False)
    expect(await api.put_biz(callback_url="https://orders.example/cb"), 201)

    problem = expect(await patch(api, {"callback_url": "http://10.0.0.1/cb"}), 422)

    assert ["body", "callback_url"] in locs(problem), problem
    assert (await stored(api)).callback_url == "https://orders.example/cb"


async def test_the_openapi_documents_the_merge_patch(api: Api) -> None:
    schema = expect(await api.request("GET", "/openapi.json"), 200)

    operation = schema["paths"]["/v1/biz-types/{biz_type}"]["patch"]
    assert operation["operationId"] == "patchBizType"
    content = operation["requestBody"]["content"]
    assert set(content) == {"application/merge-patch+json", "application/json"}, content
    assert {"200", "404", "409", "422"} <= set(operation["responses"])
    patch_schema = schema["components"]["schemas"]["BizTypePatchIn"]
    assert "required" not in patch_schema, "every field of a merge patch is optional"


async def test_put_still_replaces_the_whole_config(signed: Api) -> None:
    body = expect(await signed.put_biz(**CALLBACK, paused=True), 200)

    assert (body["has_signing_secret"], body["rate_limit_per_s"]) == (False, None), body


async def test_a_patch_or_a_put_answers_the_biz_types_creation_time(signed: Api) -> None:
    """The answer is the stored config: a replacement keeps `created_at`, as the store
    does (a PATCH answered `created_at` equal to `updated_at`, a GET the right one)."""
    created = (await stored(signed)).created_at
    signed.clock.advance(5_000)
    body = expect(await patch(signed, {"paused": True}), 200)
    assert body["created_at"] == created < body["updated_at"], body
    signed.clock.advance(5_000)
    body = expect(await signed.put_biz(**LIMITED), 200)
    assert body["created_at"] == created < body["updated_at"], body
    assert expect(await signed.request("GET", BIZ), 200)["created_at"] == created
