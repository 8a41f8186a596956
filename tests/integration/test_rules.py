"""The alert rules of ``rules/``, checked and unit-tested by the real promtool.

``promtool check rules`` validates the file; ``promtool test rules`` runs
``rules/hami-usage.rules_test.yaml``, which holds a firing and a not-firing
case for every alert. A test here also checks that the unit tests name every
alert, so a new rule cannot go untested.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from helpers import prometheus_tool

RULES = Path(__file__).resolve().parents[2] / "rules"
RULE_FILE = RULES / "hami-usage.rules.yaml"
TEST_FILE = RULES / "hami-usage.rules_test.yaml"


def rules() -> list[dict[str, object]]:
    """Every rule of the rule file, recording rules included."""
    groups = yaml.safe_load(RULE_FILE.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def alerts() -> list[dict[str, object]]:
    """Every alerting rule of the rule file."""
    return [rule for rule in rules() if "alert" in rule]


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [prometheus_tool("promtool"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=RULES,
    )


def test_promtool_checks_the_rule_file() -> None:
    done = promtool("check", "rules", RULE_FILE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout, done.stdout


def test_promtool_unit_tests_pass() -> None:
    done = promtool("test", "rules", TEST_FILE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    cases = [
        case
        for test in yaml.safe_load(TEST_FILE.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    for rule in alerts():
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert [c for c in mine if c.get("exp_alerts")], f"{rule['alert']} never fires"
        assert [c for c in mine if not c.get("exp_alerts")], f"{rule['alert']} always fires"


def test_every_alert_is_documented() -> None:
    runbook = (RULES.parent / "docs" / "runbook.md").read_text()
    for rule in alerts():
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        assert {"summary", "description", "runbook_url"} <= annotations.keys(), rule["alert"]
        name = str(rule["alert"])
        assert annotations["runbook_url"] == f"docs/runbook.md#{name.lower()}"
        assert f"\n## {name}\n" in runbook, f"docs/runbook.md has no section {name}"
