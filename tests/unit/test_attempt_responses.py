"""What is kept of an endpoint's answer (timer_service.responses): the allow-listed
headers, the body's first KiB cut on a character boundary, binary bodies as a fact,
secrets and signatures never; and a job keeps only its last answers."""

from __future__ import annotations

import bson
import pytest

from broker.callback import CallbackRequest, Response, Verdict, attempt_record
from timer_service.dispatch import OutcomeKind
from timer_service.jobs import with_answers_kept
from timer_service.model import Attempt, BizType
from timer_service.responses import (
    BODY_BYTES,
    CAPTURE_BYTES,
    HEADER_VALUE_BYTES,
    KEPT_HEADERS,
    MAX_RESPONSE_BYTES,
    REDACTED,
    RESPONSES_KEPT,
    AttemptResponse,
    capture,
    cut_utf8,
    signature_values,
)
from timer_service.signing import generate_secret

TEXT = [("Content-Type", "text/plain; charset=utf-8")]


def test_a_short_text_answer_is_kept_whole_with_only_the_allowed_headers() -> None:
    headers = [
        ("content-type", "application/json"),
        ("Retry-After", "30"),
        ("Set-Cookie", "session=abc"),
        ("Server", "nginx"),
        ("webhook-signature", "v1,abc"),
        ("x-request-id", "req-7"),
    ]
    got = capture(headers, b'{"error":"busy"}', complete=True)
    assert got == AttemptResponse(
        (("Content-Type", "application/json"), ("Retry-After", "30"), ("X-Request-Id", "req-7")),
        '{"error":"busy"}',
        truncated=False,
        binary=False,
    )
    assert got.to_dict() == {
        "headers": {
            "Content-Type": "application/json",
            "Retry-After": "30",
            "X-Request-Id": "req-7",
        },
        "body": '{"error":"busy"}',
        "truncated": False,
        "binary": False,
    }
    assert AttemptResponse.from_dict(got.to_dict()) == got


def test_a_header_sent_twice_is_one_value_joined_by_commas() -> None:
    got = capture([("X-Request-Id", "a"), ("x-request-id", "b")], b"", complete=True)
    assert got.headers == (("X-Request-Id", "a, b"),)


def test_no_body_is_null() -> None:
    got = capture([], b"", complete=True)
    assert (got.body, got.truncated, got.binary) == (None, False, False)


def test_a_long_body_is_cut_at_one_kib_on_a_character_boundary() -> None:
    body = ("é" * 600).encode()  # 2 bytes each: 1200 bytes
    got = capture(TEXT, body[:CAPTURE_BYTES], complete=False)
    assert got.body == "é" * 512, len(got.body or "")
    assert got.truncated
    # One byte short of room for the last character: it is left out, not split.
    odd = ("a" * (BODY_BYTES - 1) + "é" * 10).encode()
    got = capture(TEXT, odd, complete=True)
    assert got.body == "a" * (BODY_BYTES - 1)
    assert got.truncated


def test_a_body_of_exactly_one_kib_is_not_truncated() -> None:
    got = capture(TEXT, b"x" * BODY_BYTES, complete=True)
    assert (got.body, got.truncated) == ("x" * BODY_BYTES, False)


def test_a_character_the_read_cut_in_two_is_dropped_not_replaced() -> None:
    # A short body (after a long redaction) must not end in U+FFFD because of the read.
    secret = "s" * 900
    body = (secret + "ok€").encode()[:-1]  # '€' is 3 bytes: the read stopped inside it
    got = capture(TEXT, body, complete=False, redact=[secret])
    assert got.body == REDACTED + "ok"
    assert got.truncated, "more came after the bytes read"


def test_invalid_utf8_reads_with_replacement_characters() -> None:
    got = capture(TEXT, b"caf\xe9 au lait, s'il vous pla\xeet", complete=True)
    assert got.body == "caf\ufffd au lait, s'il vous pla\ufffdt"
    assert not got.binary


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ([("Content-Type", "image/png")], b"\x89PNG\r\n\x1a\n"),
        ([("Content-Type", "application/json"), ("Content-Encoding", "gzip")], b"\x1f\x8b\x08"),
        ([], b"text with a \x00 byte"),
        ([], bytes(range(128, 256))),  # mostly invalid UTF-8
        ([("Content-Type", "application/octet-stream")], b"plain looking"),
    ],
)
def test_a_binary_body_is_noted_not_kept(headers: list[tuple[str, str]], body: bytes) -> None:
    got = capture(headers, body, complete=True)
    assert (got.body, got.binary, got.truncated) == (None, True, False), got


@pytest.mark.parametrize(
    "content_type",
    [
        "text/html",
        "application/problem+json",
        "application/xml",
        "application/x-www-form-urlencoded",
    ],
)
def test_text_types_are_text(content_type: str) -> None:
    got = capture([("Content-Type", content_type)], b"<p>busy</p>", complete=True)
    assert (got.body, got.binary) == ("<p>busy</p>", False)


def test_a_header_value_that_is_not_utf8_is_stored_as_text() -> None:
    # aiohttp reads such bytes as lone surrogates, which BSON cannot encode: kept so,
    # the outcome's write would fail for ever.
    raw = b"req-\xff\xfe".decode("utf-8", errors="surrogateescape")
    got = capture([("X-Request-Id", raw)], b"", complete=True)
    assert got.headers == (("X-Request-Id", "req-??"),), got.headers
    bson.encode(got.to_dict())


def test_a_long_header_value_is_cut() -> None:
    got = capture([("Location", "https://x.example/" + "ü" * 200)], b"", complete=True)
    ((_, value),) = got.headers
    assert len(value.encode()) <= HEADER_VALUE_BYTES
    assert value.startswith("https://x.example/ü")


def test_secrets_and_signatures_echoed_back_are_never_kept() -> None:
    secret = generate_secret()
    biz = BizType("orders", "http://127.0.0.1/cb", signing_secret=secret)
    request = CallbackRequest(b"{}", {"webhook-signature": "v1,c2lnbmF0dXJlLW9uZQ== v1,dHdv"})
    echo = (
        f'{{"headers":{{"webhook-signature":"v1,c2lnbmF0dXJlLW9uZQ== v1,dHdv"}},'
        f'"secret":"{secret}","key":"{secret.removeprefix("whsec_")}"}}'
    ).encode()
    response = Response(
        400, headers=(("Content-Type", "application/json"), ("X-Request-Id", secret)), body=echo
    )
    verdict = Verdict(OutcomeKind.DEAD, "HTTP 400")
    kept = attempt_record(1, 1000, response, verdict, 5, (biz, request)).response
    assert kept is not None
    shown = str(kept.to_dict())
    for value in (secret, secret.removeprefix("whsec_"), "c2lnbmF0dXJlLW9uZQ==", "dHdv"):
        assert value not in shown, f"{value!r} kept: {shown}"
    assert kept.body is not None and kept.body.count(REDACTED) == 4, kept.body
    assert dict(kept.headers)["X-Request-Id"] == REDACTED


def test_a_signature_straddling_the_cut_is_redacted_before_cutting() -> None:
    signature = "v1,K2V4YW1wbGUtc2lnbmF0dXJlLWZvci10aGUtdGVzdA=="
    body = ("a" * (BODY_BYTES - 20) + signature + "b" * 100).encode()
    got = capture(TEXT, body[:CAPTURE_BYTES], complete=False, redact=signature_values(signature))
    assert got.body is not None and got.body.endswith("a" + REDACTED + "b" * 10), got.body[-40:]
    assert "K2V4" not in got.body


def test_no_answer_no_response() -> None:
    verdict = Verdict(OutcomeKind.RETRY, "timeout", 5000)
    record = attempt_record(2, 1000, Response(None, error="timeout"), verdict, 10_000)
    assert record.response is None
    assert record.to_public()["response"] is None


def test_signature_values_are_the_entries_and_their_signatures() -> None:
    assert signature_values("v1,abc v1,def") == ["v1,abc", "abc", "v1,def", "def"]
    assert signature_values(None) == []


def test_cut_utf8_never_splits_a_character() -> None:
    for limit in range(0, 12):
        cut = cut_utf8("a€b€c", limit)
        assert len(cut.encode()) <= limit and "a€b€c".startswith(cut), (limit, cut)


def test_the_figures_per_answer_and_per_job() -> None:
    # docs/api.md, "Attempt responses", states these: keep them in step. The worst
    # answer: every kept header long, a text body longer than 1 KiB.
    typed = ("Content-Type", "Content-Encoding")
    headers = [(name, "v" * 500) for name in KEPT_HEADERS if name not in typed]
    headers += [("Content-Type", "text/plain;" + "v" * 500), ("Content-Encoding", "identity")]
    worst = capture(headers, b"x" * CAPTURE_BYTES, complete=False)
    assert not worst.binary and worst.body == "x" * BODY_BYTES
    stored = {"attempt": 10, "at": 1_767_225_600_000, **worst.to_dict()}
    one = len(bson.encode({"responses": [stored]}))
    assert one <= MAX_RESPONSE_BYTES <= 2200, one
    per_job = len(bson.encode({"responses": [stored] * RESPONSES_KEPT}))
    assert per_job <= 22 * 1024, per_job
    assert (BODY_BYTES, HEADER_VALUE_BYTES, RESPONSES_KEPT) == (1024, 128, 10)


def answered(n: int) -> Attempt:
    return Attempt(n, 1000 * n, 503, "HTTP 503", 5, AttemptResponse(body=f"no {n}"))


def test_a_job_keeps_the_answers_of_its_last_attempts_only() -> None:
    timeout = Attempt(3, 3000, None, "timeout", 10_000)
    history = tuple(answered(n) if n != 3 else timeout for n in range(1, 15))
    kept = with_answers_kept(history)
    have = [a.attempt for a in kept if a.response is not None]
    assert have == list(range(5, 15)), have  # the last 10 answers; a timeout has none
    assert [a.attempt for a in kept] == list(range(1, 15)), "the history itself is whole"
    assert with_answers_kept(history[:4]) == history[:4]
