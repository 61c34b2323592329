"""docs/architecture.md names rooms that exist, and every module of the adapters is named there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
HOME = {"rllm_plugins": ROOT / "rllm_plugins", "rllm_verl": ROOT / "adapters" / "rllm_verl", "rllm_trl": ROOT / "adapters" / "rllm_trl"}


def rooms_named() -> list[str]:
    """``rllm_verl/compute/``, ``rllm_trl/outcome.py`` ...: every backticked path that starts with a package."""
    return re.findall(r"`((?:rllm_plugins|rllm_verl|rllm_trl)/[\w/]*(?:\.py)?)`", DOC.read_text())


def where(room: str) -> Path:
    package, _, rest = room.partition("/")
    return HOME[package] / rest


def test_the_reader_finds_rooms():
    assert "rllm_verl/compute/" in rooms_named() and "rllm_plugins/spec.py" in rooms_named()


def test_every_room_the_architecture_names_exists():
    missing = [room for room in rooms_named() if not (where(room).is_file() if room.endswith(".py") else where(room).is_dir())]
    assert not missing, f"docs/architecture.md names rooms that do not exist: {missing}"


def test_every_adapter_module_is_named_in_the_architecture():
    text = DOC.read_text()
    for package in ("rllm_verl", "rllm_trl"):
        for path in sorted(HOME[package].rglob("*.py")):
            if path.name == "__init__.py":
                continue
            relative = path.relative_to(HOME[package])
            folder = f"{package}/{relative.parent.as_posix()}/" if relative.parent != Path(".") else None
            named = f"`{package}/{relative.as_posix()}`" in text or (folder is not None and f"`{folder}`" in text and f"`{path.stem}`" in text)
            assert named, f"docs/architecture.md does not name {package}/{relative.as_posix()}"
