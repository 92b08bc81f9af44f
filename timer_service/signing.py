"""Standard Webhooks signatures (docs/api.md, "Callback protocol"), shared by broker and receiver.

A callback is signed as the Standard Webhooks specification says
(https://www.standardwebhooks.com): the signed content is
`"<webhook-id>.<webhook-timestamp>." + raw body bytes`, the signature is
`v1,<base64 of HMAC-SHA256(key, signed content)>`, and the `webhook-signature`
header holds one such entry per valid secret, separated by spaces.

How a secret becomes the HMAC key (`signing_key`):

- a Standard Webhooks secret, `whsec_<base64>`: the base64-decoded bytes after
  the prefix, exactly as every Standard Webhooks library reads it; give the
  whole `whsec_...` string to that library (`new Webhook("whsec_...")`);
- any other string (the contract's example `"s3cret"`): its UTF-8 bytes. A
  receiver in another language uses it with a Standard Webhooks library by
  turning it into a Standard Webhooks secret first: `"whsec_" +
  base64(utf8(secret))` (`"s3cret"` -> `"whsec_czNjcmV0"`), or by giving the
  library the raw key bytes where it takes them (Python: `Webhook(b"s3cret")`).
  By hand: HMAC-SHA256 with the secret's UTF-8 bytes as the key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Iterable
from secrets import token_bytes

SECRET_PREFIX = "whsec_"
SIGNATURE_VERSION = "v1"
MIN_KEY_BYTES = 16
GENERATED_KEY_BYTES = 32

_BASE64 = re.compile(r"[A-Za-z0-9+/]*", re.ASCII)


class InvalidSecret(ValueError):
    """The signing secret is not usable."""


def generate_secret() -> str:
    """A new random Standard Webhooks secret: `whsec_` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(token_bytes(GENERATED_KEY_BYTES)).decode()


def signing_key(secret: str) -> bytes:
    """The HMAC key of `secret` (see the module docstring); InvalidSecret when unusable."""
    if not secret:
        raise InvalidSecret("a signing secret must not be empty")
    if not secret.startswith(SECRET_PREFIX):
        try:
            return secret.encode()
        except UnicodeEncodeError:  # a lone surrogate: no UTF-8 bytes, no key elsewhere
            raise InvalidSecret("a signing secret must be valid Unicode text") from None
    # Padding is optional, as it is for the Standard Webhooks libraries.
    encoded = secret.removeprefix(SECRET_PREFIX).rstrip("=")
    if not _BASE64.fullmatch(encoded) or len(encoded) % 4 == 1:
        raise InvalidSecret(f"a {SECRET_PREFIX} secret must be {SECRET_PREFIX} + standard base64")
    key = base64.b64decode(encoded + "=" * (-len(encoded) % 4))
    if len(key) < MIN_KEY_BYTES:
        raise InvalidSecret(
            f"a {SECRET_PREFIX} secret must decode to at least {MIN_KEY_BYTES} bytes,"
            f" this one has {len(key)}"
        )
    return key


def signed_content(msg_id: str, timestamp_s: int | str, body: bytes) -> bytes:
    return f"{msg_id}.{timestamp_s}.".encode() + body


def digest(key: bytes, msg_id: str, timestamp_s: int | str, body: bytes) -> bytes:
    """The raw HMAC-SHA256 of one message: what a `v1,` entry carries in base64."""
    return hmac.new(key, signed_content(msg_id, timestamp_s, body), hashlib.sha256).digest()


def sign(secret: str, msg_id: str, timestamp_s: int | str, body: bytes) -> str:
    """One `v1,<base64>` entry of the `webhook-signature` header."""
    mac = digest(signing_key(secret), msg_id, timestamp_s, body)
    return f"{SIGNATURE_VERSION},{base64.b64encode(mac).decode()}"


def signature_header(
    secrets: Iterable[str], msg_id: str, timestamp_s: int | str, body: bytes
) -> str:
    """The `webhook-signature` value: one entry per secret, space-separated, in order given.

    A secret that is not usable (the API refuses them; only a config stored before it did
    can hold one) signs nothing: its receiver refuses the callback, the sender does not fail.
    """
    entries = []
    for secret in secrets:
        try:
            entries.append(sign(secret, msg_id, timestamp_s, body))
        except InvalidSecret:
            continue
    return " ".join(entries)
