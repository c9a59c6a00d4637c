"""Where the tests find the repository, its scripts and the tests' own data and fixtures."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
"""The tests/ folder."""
REPO = TESTS.parent
"""The repository's root (pyproject.toml, README.md, scripts/)."""
SCRIPTS = REPO / "scripts"
DATA = TESTS / "data"
"""Measured data the tests compare with (not copies of lbm/reference's packaged tables)."""
FIXTURES = TESTS / "fixtures"
"""Real traces and reports kept from the accelerators (tests/fixtures/device)."""
