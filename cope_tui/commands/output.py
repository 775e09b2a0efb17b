"""Writing a command's data to stdout: exactly one JSON document (narration goes to stderr)."""

from __future__ import annotations

import sys
from typing import Any


def write_json(doc: Any) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
