"""What the service tells a user to install names this project's distribution
(`callback-timer-service`), never `timer-service`: that name on PyPI is an unrelated
project (README.md, "Pinned builds")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from timer_service import embedded
from timer_service.embedded import EmbeddedStore, EmbeddedStoreMissing

ROOT = Path(__file__).resolve().parents[2]
WRONG_DISTRIBUTION = re.compile(r"(?<![\w-])timer-service\[")  # an extra of the wrong name


async def test_a_missing_embedded_store_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(embedded.shutil, "which", lambda *a, **k: None)
    with pytest.raises(EmbeddedStoreMissing) as missing:
        await EmbeddedStore(tmp_path / "data").start()
    message = str(missing.value)
    assert not WRONG_DISTRIBUTION.search(message), f"names the unrelated project: {message}"
    assert "pip install -e '.[embedded]'" in message, message
    assert "callback-timer-service" in message and "TIMER_MONGO_URL" in message, message
    assert not (tmp_path / "data").exists(), "a refused start made its data directory"


def test_no_source_or_doc_names_an_extra_of_the_unrelated_project() -> None:
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    for package in ("timer_service", "daemon", "broker"):
        files += (ROOT / package).rglob("*.py")
    wrong = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if WRONG_DISTRIBUTION.search(line)
    ]
    assert wrong == [], "say callback-timer-service[...] instead:\n" + "\n".join(wrong)
