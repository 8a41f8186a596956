"""docs/promql.md: its support table is the one the differential suite's cases give."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from collector.promql.plan import (
    AGGREGATIONS,
    NATIVE_HISTOGRAM_FUNCTIONS,
    RANGE_FUNCTIONS,
    SCALAR_FUNCTIONS,
    VECTOR_FUNCTIONS,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "promql-support-table"
DOC = ROOT / "docs" / "promql.md"


def _check(doc: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--check", str(doc)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_support_table_is_current_and_a_stale_one_is_refused(tmp_path: Path) -> None:
    assert _check(DOC).returncode == 0, _check(DOC).stderr
    stale = tmp_path / "promql.md"
    stale.write_text(DOC.read_text().replace("| `sin` | proven:", "| `sin` | maybe:"))
    refused = _check(stale)
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1
    unmarked = tmp_path / "unmarked.md"
    unmarked.write_text("# no table\n")
    assert _check(unmarked).returncode == 1


def test_every_supported_name_is_proven_against_prometheus() -> None:
    """What the plan accepts, the suite compares with Prometheus; what it refuses, the doc says."""
    text = DOC.read_text()
    supported = AGGREGATIONS | VECTOR_FUNCTIONS | RANGE_FUNCTIONS | SCALAR_FUNCTIONS
    for name in sorted(supported):
        assert f"| `{name}` | proven:" in text, name
    for name in sorted(NATIVE_HISTOGRAM_FUNCTIONS):
        assert f"| `{name}` | refused (422)" in text, name
    assert "not proven" not in text
