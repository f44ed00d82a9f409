"""tests/make_prerequisites.py on the real Makefile, and on copies with a mistake put back.

The first copy is the Makefile as it was when a fresh machine failed `make test`:
`LAVAPIPE := ...` below the `test:` rule that names it, so make gave `test` no lavapipe.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.make_prerequisites import NEEDS, ROOT, check, read_database

MAKEFILE = (ROOT / "Makefile").read_text()


def _copy(tmp_path: Path, text: str) -> Path:
    makefile = tmp_path / "Makefile"
    makefile.write_text(text)
    return makefile


def _move_definition_below(text: str, name: str, target: str) -> str:
    """The Makefile with `NAME := ...` taken out and put back right after TARGET's rule."""
    definition = re.search(rf"^{name} := .*\n", text, flags=re.MULTILINE)
    assert definition, f"the Makefile defines {name}"
    text = text.replace(definition[0], "", 1)
    rule = re.search(rf"^{re.escape(target)}:.*\n(\t.*\n)*", text, flags=re.MULTILINE)
    assert rule, f"the Makefile has a {target} rule"
    return text[: rule.end()] + definition[0] + text[rule.end() :]


def test_the_makefile_gives_every_target_what_it_needs() -> None:
    assert check(ROOT / "Makefile") == []


def test_make_reads_each_needed_stamp_as_the_makefile_defines_it() -> None:
    database = read_database(ROOT / "Makefile")
    assert database.variables["LAVAPIPE"].value == ".venv/.lavapipe"
    assert database.variables["SSHD"].value == ".venv/.sshd"
    for target, needs in NEEDS.items():
        for need in needs:
            assert database.variables[need].value in database.prerequisites[target]


def test_a_stamp_defined_below_the_rule_that_names_it_is_caught(tmp_path: Path) -> None:
    makefile = _copy(tmp_path, _move_definition_below(MAKEFILE, "LAVAPIPE", "test"))
    problems = check(makefile)
    assert any(p.startswith("test needs $(LAVAPIPE) (.venv/.lavapipe)") for p in problems)
    assert any(re.match(r"Makefile:\d+: \$\(LAVAPIPE\) is used here but defined", p)
               for p in problems)  # fmt: skip


@pytest.mark.parametrize(("target", "need"), [("test", "SSHD"), ("test", "INSTALLED"),
                                              ("test-gpu", "LAVAPIPE")])  # fmt: skip
def test_a_target_that_forgets_a_need_is_caught(tmp_path: Path, target: str, need: str) -> None:
    rule = re.search(rf"^{re.escape(target)}:(.*)$", MAKEFILE, flags=re.MULTILINE)
    assert rule and f"$({need})" in rule[1]
    text = MAKEFILE.replace(rule[0], rule[0].replace(f" $({need})", ""), 1)
    problems = check(_copy(tmp_path, text))
    assert problems == [problems[0]] and problems[0].startswith(f"{target} needs $({need})")


def test_a_late_definition_is_caught_for_a_target_nobody_listed(tmp_path: Path) -> None:
    text = _move_definition_below(MAKEFILE, "PORTABLE_WHEEL_STAMP", "$(PORTABLE_INSTALLED)")
    problems = check(_copy(tmp_path, text))
    assert len(problems) == 3  # the bench venv's rule, the portable wheel's and its venv's
    assert all("$(PORTABLE_WHEEL_STAMP) is used here but defined" in p for p in problems)
