"""`mypy --strict` on a consumer of the SDK (tests/unit/sdk_consumer.py): it uses every
public method of both clients and passes, with no `Any` reaching its expressions; copies
with a misspelt argument, a missing one, a wrong role or state fail at those lines."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from mypy import api

from timer_service.client import AsyncTimerClient, TimerClient

ROOT = Path(__file__).resolve().parents[2]
CONSUMER = Path(__file__).with_name("sdk_consumer.py")
MISTAKES = {
    # (what is written, the mistake): the message mypy must give
    ('        window_ms=60_000,\n', '        windw_ms=60_000,\n'):
        'Unexpected keyword argument "windw_ms" for "create_job" of "TimerClient"',
    ('        max_concurrency=32,\n', '        max_concurency=32,\n'):
        'Unexpected keyword argument "max_concurency" for "put_biz_type" of "TimerClient"',
    ('"orders", rate_limit_per_s=None, retry=', '"orders", rate_limit=None, retry='):
        'Unexpected keyword argument "rate_limit" for "patch_biz_type" of "TimerClient"',
    ('await timers.put_biz_type("orders", callback_url="https://orders.internal/cb")',
     'await timers.put_biz_type("orders")'):
        'Missing named argument "callback_url" for "put_biz_type" of "AsyncTimerClient"',
    ('"orders", state="dead", limit=100', '"orders", state="died", limit=100'):
        'Argument "state" to "bulk_replay" of "TimerClient" has incompatible type',
    ('create_token("ops", "admin")', 'create_token("ops", "root")'):
        'Argument 2 to "create_token" of "AsyncTimerClient" has incompatible type',
    ('cron="0 3 * * *", timezone="Europe/Berlin", catchup="one"',
     'cron="0 3 * * *", timezone="Europe/Berlin", catchup="once"'):
        'Argument "catchup" to "put_schedule" of "TimerClient" has incompatible type',
}  # fmt: skip


# mypy's incremental cache, kept between runs as the repository's own mypy run keeps
# .mypy_cache (mypy rechecks whatever changed): a cold run parses typeshed and the SDK,
# ~2 s, a warm one well under one. A directory of its own: these are not the
# repository's options.
CACHE = ROOT / ".mypy_cache" / "sdk-consumer"


def mypy_strict(source: Path, config_dir: Path) -> tuple[str, int]:
    # Not the repository's config (packages=...): it would check more than `source`. No
    # `Any` in the consumer's expressions, whatever the SDK does inside.
    config = config_dir / "mypy.ini"
    config.write_text(
        "[mypy]\ndisallow_any_expr = True\n[mypy-timer_service.*]\ndisallow_any_expr = False\n"
    )
    out, err, status = api.run([
        "--strict", "--config-file", str(config),
        "--cache-dir", str(CACHE), "--no-error-summary", "--show-error-codes", str(source),
    ])  # fmt: skip
    return out + err, status


def public(cls: type) -> set[str]:
    return {n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}


def test_the_consumer_uses_every_method_of_both_clients() -> None:
    used = set(re.findall(r"\.(\w+)\(", CONSUMER.read_text()))
    missing = (public(TimerClient) | public(AsyncTimerClient)) - used
    assert not missing, f"sdk_consumer.py does not call {sorted(missing)}"


@pytest.fixture
def mypy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MYPYPATH", str(ROOT))  # the SDK as this checkout has it
    monkeypatch.chdir(ROOT)


@pytest.mark.usefixtures("mypy_path")
def test_mypy_strict_passes_the_consumer_and_fails_each_mistake(tmp_path: Path) -> None:
    said, status = mypy_strict(CONSUMER, tmp_path)
    assert status == 0 and not said.strip(), f"expected mypy --strict to pass, it said:\n{said}"

    source = CONSUMER.read_text()
    wrong = source
    for (written, mistaken), _ in MISTAKES.items():
        assert source.count(written) == 1, f"expected {written!r} once in sdk_consumer.py"
        wrong = wrong.replace(written, mistaken)
    copy = tmp_path / "sdk_consumer_wrong.py"
    copy.write_text(wrong)
    said, status = mypy_strict(copy, tmp_path)
    assert status == 1, f"expected mypy to fail the misspelt copy, it said:\n{said}"
    for message in MISTAKES.values():
        assert message in said, f"expected {message!r} from mypy, got:\n{said}"
    errors = [line for line in said.splitlines() if ": error:" in line]
    assert len(errors) == len(MISTAKES), f"expected {len(MISTAKES)} errors, got:\n{said}"
