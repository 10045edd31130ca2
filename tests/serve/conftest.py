"""The serve tests need the extra ``serve``: skipped without it (the core environment), failed
instead when RAGDX_REQUIRE_FRAMEWORKS is set (CI's full environment installs every extra)."""

from __future__ import annotations

import pytest

from tests.integrations.conftest import require


@pytest.fixture(autouse=True)
def _serve_extra() -> None:
    require("starlette", "uvicorn", "opentelemetry.proto", extras="serve")
