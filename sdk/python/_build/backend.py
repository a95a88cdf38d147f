"""A dependency-free PEP 517 backend: builds keel-sdk's wheel (and sdist) with the standard
library only, so `pip wheel` / `pip install` / `python -m build` work offline."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "src"


def _project() -> dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["project"])


def _names() -> tuple[str, str, str]:
    project = _project()
    name, version = project["name"], project["version"]
    return name, version, f"{name.replace('-', '_')}-{version}"


def _metadata() -> str:
    project = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project.get('description', '')}",
        f"Requires-Python: {project.get('requires-python', '>=3.10')}",
        *[f"Requires-Dist: {dependency}" for dependency in project.get("dependencies", [])],
        "Description-Content-Type: text/markdown",
        "",
        (ROOT / "README.md").read_text(),
    ]
    return "\n".join(lines)


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _, _, stem = _names()
    files: dict[str, bytes] = {}
    for path in sorted(SOURCES.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[path.relative_to(SOURCES).as_posix()] = path.read_bytes()
    info = f"{stem}.dist-info"
    files[f"{info}/METADATA"] = _metadata().encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: keel-sdk _build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [_record_line(name, data) for name, data in files.items()]
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    filename = f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / filename, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return filename


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    _, _, stem = _names()
    filename = f"{stem}.tar.gz"
    with tarfile.open(Path(sdist_directory) / filename, "w:gz") as sdist:
        for path in sorted(ROOT.rglob("*")):
            relative = path.relative_to(ROOT)
            if path.is_file() and not {"__pycache__", ".pytest_cache"} & set(relative.parts):
                sdist.add(path, f"{stem}/{relative.as_posix()}")
        metadata = _metadata().encode()
        entry = tarfile.TarInfo(f"{stem}/PKG-INFO")
        entry.size = len(metadata)
        sdist.addfile(entry, io.BytesIO(metadata))
    return filename


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    return []
