"""Reading the data files shipped in the `assets` package."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def load_asset_json(name: str) -> Any:
    """Parse one JSON file shipped inside the installed `assets` package."""
    text = resources.files("assets").joinpath(name).read_text(encoding="utf-8")
    return json.loads(text)
