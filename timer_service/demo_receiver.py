"""A callback receiver for trying the service: prints every callback it gets.

python -m timer_service.demo_receiver [port] [--secret S ...] [--fail-first N]

With --secret (repeat it to accept both secrets during a rotation) it verifies each
callback's Standard Webhooks signature and answers 401 to one that does not check out.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

from aiohttp import web

from timer_service.receiver import InvalidSignature, verify_callback


def build_app(secrets: Sequence[str], fail_first: int) -> web.Application:
    failures_left = {"n": fail_first}

    async def callback(request: web.Request) -> web.Response:
        body = await request.read()
        now_ms = time.time_ns() // 1_000_000
        if secrets:
            try:
                verify_callback(body, request.headers, secrets)
            except InvalidSignature as exc:
                print(f"REJECTED: {exc}", flush=True)
                return web.Response(status=401)
        if failures_left["n"] > 0:
            failures_left["n"] -= 1
            print(f"answering 503 to {request.headers.get('webhook-id')}", flush=True)
            return web.Response(status=503)
        data = json.loads(body)
        late = now_ms - data["due_at"]
        print(
            f"callback {data['biz_type']}/{data['job_id']} attempt {data['attempt']} "
            f"payload={json.dumps(data['payload'])} ({late} ms after due)",
            flush=True,
        )
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/callback", callback)
    app.router.add_post("/{tail:.*}", callback)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("port", type=int, nargs="?", default=9000)
    parser.add_argument(
        "--secret", action="append", default=[], help="verify webhook-signature with it"
    )
    parser.add_argument("--fail-first", type=int, default=0, help="answer 503 this many times")
    args = parser.parse_args()
    print(f"receiving callbacks on http://127.0.0.1:{args.port}/callback", flush=True)
    web.run_app(
        build_app(args.secret, args.fail_first), host="127.0.0.1", port=args.port, print=None
    )


if __name__ == "__main__":
    main()
