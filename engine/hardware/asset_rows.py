"""Validation of a shipped asset's list of entries, with errors that name the asset, the
entry and the field (engine.hardware.platform's GPU and CPU presets)."""

from __future__ import annotations

from typing import Any

from engine.core.errors import CopeInputError

SCHEMA_VERSION = 1


class Rows:
    """Checks the fields of one asset's entries, raising errors that name asset and field."""

    def __init__(self, asset: str, data: Any, list_key: str, *, version: int = SCHEMA_VERSION):
        self.asset = asset
        self.path = f"assets/{asset}"
        if not isinstance(data, dict):
            self.fail("the top level must be a JSON object")
        found = data.get("schema_version")
        if found != version:
            self.fail(f"schema_version: expected {version}, found {found!r}")
        rows = data.get(list_key)
        if not isinstance(rows, list) or not rows:
            self.fail(f"{list_key}: must be a non-empty list")
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                self.fail(f"{list_key}[{i}]: must be a JSON object")
        self.rows: list[dict[str, Any]] = rows
        self.list_key = list_key

    def fail(self, message: str) -> None:
        raise CopeInputError(message, path=self.path)

    def _where(self, i: int, field: str) -> str:
        row_id = self.rows[i].get("id")
        label = f"{self.list_key}[{i}]" + (f" ({row_id})" if isinstance(row_id, str) else "")
        return f"{label}.{field}"

    def text(self, i: int, field: str) -> str:
        v = self.rows[i].get(field)
        if not isinstance(v, str) or not v.strip():
            self.fail(f"{self._where(i, field)}: must be a non-empty string, found {v!r}")
        return v  # type: ignore[return-value]

    def positive_int(self, i: int, field: str) -> int:
        v = self.rows[i].get(field)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            self.fail(f"{self._where(i, field)}: must be a positive integer, found {v!r}")
        return v  # type: ignore[return-value]

    def positive_number(self, i: int, field: str) -> float:
        v = self.rows[i].get(field)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v != v or v == float("inf"):
            self.fail(f"{self._where(i, field)}: must be a positive number, found {v!r}")
        return float(v)  # type: ignore[arg-type]

    def sources(self, i: int, figures: tuple[str, ...]) -> dict[str, str]:
        """The row's `sources`: for each of `figures`, a vendor address and what it says."""
        v = self.rows[i].get("sources")
        if not isinstance(v, dict):
            self.fail(f"{self._where(i, 'sources')}: must be an object giving a source for each of {', '.join(figures)}")
        for name in figures:
            cite = v.get(name)  # type: ignore[union-attr]
            if not isinstance(cite, str) or "https://" not in cite:
                self.fail(f"{self._where(i, 'sources')}.{name}: must be a source with its https:// address, found {cite!r}")
        return {name: v[name] for name in figures}  # type: ignore[index]

    def texts(self, i: int, field: str) -> tuple[str, ...]:
        """An optional list of non-empty strings (empty when absent)."""
        v = self.rows[i].get(field, [])
        if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
            self.fail(f"{self._where(i, field)}: must be a list of non-empty strings, found {v!r}")
        return tuple(v)  # type: ignore[arg-type]

    def has(self, i: int, field: str) -> bool:
        return self.rows[i].get(field) is not None

    def unique_ids(self) -> list[str]:
        ids = [self.text(i, "id") for i in range(len(self.rows))]
        seen: set[str] = set()
        for i, row_id in enumerate(ids):
            if row_id.lower() in seen:
                self.fail(f"{self._where(i, 'id')}: duplicate id {row_id!r}")
            seen.add(row_id.lower())
        return ids
