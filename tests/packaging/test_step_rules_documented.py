"""docs/reliability.md names every step-level contract rule, in checking order, and no other."""

from __future__ import annotations

import re
from pathlib import Path

from rllm_plugins.testing.step_contract import STEP_RULES

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def test_the_step_level_rules_paragraph_lists_the_checkers_rules():
    text = DOC.read_text()
    paragraph = text[text.index('Step-level estimators (`level="step"`) have rules of their own:') :].split("\n\n")[0]
    documented = [n for n in re.findall(r"`([a-z_]+)`", paragraph) if n in STEP_RULES]
    assert documented == list(STEP_RULES)
