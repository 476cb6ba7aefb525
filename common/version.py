"""The project's version, read once: `version` of pyproject.toml's [project] table in a checkout
(the project is run from its clone, not pip-installed), else the installed distribution's."""

from __future__ import annotations

import functools
import os
import re

DISTRIBUTION = "bert-tf2"
PYPROJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")


def from_pyproject(text: str) -> str | None:
    """`version` of the [project] table of a pyproject.toml's text; None where it has none."""
    table = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    found = table and re.search(r"^version\s*=\s*[\"']([^\"']+)[\"']", table.group(1), re.M)
    return found.group(1) if found else None


@functools.cache
def version() -> str:
    """'0.9.0': the checkout's pyproject.toml (always current), else the installed package's
    metadata, else 'unknown'."""
    try:
        with open(PYPROJECT, encoding="utf-8") as f:
            found = from_pyproject(f.read())
        if found:
            return found
    except OSError:
        pass
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"
