"""The chart's README: what `helm show readme` prints, with a values table that is current."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from test_chart import CHART, ROOT, helm

SCRIPT = ROOT / "scripts" / "chart-values-table"


def _check(chart: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--check", str(chart)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_helm_show_readme_prints_the_chart_readme() -> None:
    shown = helm("show", "readme", CHART)
    assert shown.strip() == (CHART / "README.md").read_text().strip()
    assert "| `discovery.flavours` | array |" in shown


def test_the_values_table_is_current_and_a_stale_one_is_refused(tmp_path: Path) -> None:
    assert _check(CHART).returncode == 0, _check(CHART).stderr
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    schema = json.loads((chart / "values.schema.json").read_text())
    schema["properties"]["nameOverride"]["description"] = "A meaning the table does not have."
    (chart / "values.schema.json").write_text(json.dumps(schema))
    stale = _check(chart)
    assert stale.returncode == 1
    assert stale.stderr.count("\n") == 1
    assert "values table out of date" in stale.stderr
    subprocess.run([sys.executable, str(SCRIPT), str(chart)], check=True, timeout=60)
    assert _check(chart).returncode == 0
    assert "A meaning the table does not have." in (chart / "README.md").read_text()


def test_a_hand_edited_table_is_refused(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    readme = chart / "README.md"
    text = readme.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `discovery.flavours` |"))
    readme.write_text(text.replace(row, row.replace("array", "list")))
    stale = _check(chart)
    assert stale.returncode == 1
    assert stale.stderr.count("\n") == 1
    assert "values table out of date" in stale.stderr
