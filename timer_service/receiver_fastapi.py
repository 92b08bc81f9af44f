"""`CallbackVerifier`: `verify_callback` as a FastAPI dependency (docs/api.md).

    verifier = CallbackVerifier(["new-secret", "old-secret"])

    @app.post("/timer-callback")
    async def on_timer(cb: Callback = Depends(verifier)) -> None: ...

Import it from `timer_service.receiver`, which loads this module when it is first asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import HTTPException, Request

from timer_service.receiver import Callback, InvalidSignature, signing_keys, verify_with_keys


class CallbackVerifier:
    """A FastAPI dependency: the verified `Callback`, or 401."""

    def __init__(self, secrets: str | Sequence[str], tolerance_s: float = 300) -> None:
        self._keys = signing_keys(secrets)
        self._tolerance_s = tolerance_s

    async def __call__(self, request: Request) -> Callback:
        body = await request.body()
        try:
            return verify_with_keys(body, request.headers, self._keys, self._tolerance_s)
        except InvalidSignature as exc:
            raise HTTPException(status_code=401, detail=str(exc)) from None
