"""Shared fixtures: paths to the test verifiers."""

from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture
def verifiers_dir() -> Path:
    return HERE / "verifiers"
