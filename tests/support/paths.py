"""Where the tests find things: the checkout, tests/, and the fixture traces in tests/data."""
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
DATA = TESTS / "data"
