"""The test suite's fake API server and oracle, for the soak: they live with the tests.

The tests import them as top-level modules (``tests/`` is on their path), so
the soak does the same: one module name each, for Python and for mypy.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakekube import FakeKube, make_pod
from oracle import expected_canonical

__all__ = ["FakeKube", "expected_canonical", "make_pod"]
