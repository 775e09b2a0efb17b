from __future__ import annotations

from pathlib import Path

import pytest

SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


@pytest.fixture
def shared_traces() -> Path:
    """The real routing data beside the checkout; tests that need it skip without it."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"real routing data not found at {SHARED_TRACES}")
    return SHARED_TRACES
