"""The Makefile's targets name what they need, checked against make's own database.

A prerequisite written as `$(LAVAPIPE)` on a rule above `LAVAPIPE := ...` expands to
nothing: make reads a rule's prerequisites when it reads the rule, so `make test` quietly
ran without installing lavapipe, and CI passed only because an earlier session had left
lavapipe on its machine. Nothing failed where the mistake was made. This check reads what
make itself made of the Makefile (`make -p`, which prints every variable with the line
that defined it and every rule with the prerequisites make will build), and fails on:

- a target that lacks a prerequisite it needs (NEEDS: the installed venv, the lavapipe
  stamp, the ssh server), whatever the Makefile's text says;
- any rule whose prerequisites name a variable of the Makefile's that is defined only
  further down, for every target, listed here or not.

`make test` runs it first; tests/test_make_prerequisites.py shows each finding on a copy
of the Makefile with the mistake put back. Run by hand: `python tests/make_prerequisites.py`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What each target cannot run without, by the Makefile's variable names: the stamps whose
# rules install the system's part (Mesa's software Vulkan driver, OpenSSH's server) and the
# venv. A newcomer's machine has none of them, so a target that forgets one fails there only.
NEEDS: dict[str, tuple[str, ...]] = {
    "run": ("INSTALLED",),
    "test": ("INSTALLED", "LAVAPIPE", "SSHD"),
    "test-gpu": ("INSTALLED", "LAVAPIPE", "FIT_PARAMS"),
    "installer-test": ("INSTALLER_TOOLS", "LAVAPIPE"),
    "windows": ("INSTALLER_TOOLS", "WINDOWS_TOOLS"),
    "test-windows": ("INSTALLER_TOOLS", "WINDOWS_TOOLS", "LAVAPIPE"),
    "lint": ("INSTALLED",),
}

NO_OP_GOAL = "make-prerequisites-database"
VARIABLE_ORIGIN = re.compile(r"^# makefile \(from '(?P<file>[^']+)', line (?P<line>\d+)\)$")
SIMPLE_VARIABLE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*) :?= ?(?P<value>.*)$")
RULE = re.compile(r"^(?P<targets>[^#\s=][^=]*?):(?!=)(?P<prerequisites>.*)$")
REFERENCE = re.compile(r"\$[({](?P<name>[A-Za-z_][A-Za-z0-9_]*)[)}]")


@dataclass(frozen=True)
class Variable:
    value: str
    line: int  # where the Makefile defines it


@dataclass(frozen=True)
class Database:
    """What `make -p` printed: the Makefile's variables and each target's prerequisites."""

    variables: dict[str, Variable]
    prerequisites: dict[str, tuple[str, ...]]  # normal and order-only together


def read_database(makefile: Path) -> Database:
    """Make's database for the Makefile, without building anything: the goal is a rule
    of no recipe given on stdin, and -n -q keep every recipe from running."""
    printed = subprocess.run(
        ["make", "-pnq", "-rR", "-C", str(makefile.parent), "-f", makefile.name, "-f", "-",
         NO_OP_GOAL],
        input=f".PHONY: {NO_OP_GOAL}\n{NO_OP_GOAL}:\n", capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    if "# Finished Make data base" not in printed.stdout:
        raise SystemExit(f"make printed no database for {makefile}: {printed.stderr.strip()}")
    return parse_database(printed.stdout.splitlines(), makefile.name)


def parse_database(lines: list[str], makefile_name: str) -> Database:
    variables: dict[str, Variable] = {}
    prerequisites: dict[str, tuple[str, ...]] = {}
    origin: int | None = None
    in_files = False
    for line in lines:
        if line == "# Files":
            in_files = True
            continue
        if line.startswith("# Finished Make data base"):
            break
        found = VARIABLE_ORIGIN.match(line)
        if found:
            origin = int(found["line"]) if found["file"] == makefile_name else None
            continue
        if not in_files:
            variable = SIMPLE_VARIABLE.match(line)
            if variable and origin is not None:
                variables[variable["name"]] = Variable(variable["value"], origin)
            origin = None
            continue
        rule = RULE.match(line)
        if rule and not line.startswith("\t"):
            names = tuple(rule["prerequisites"].replace("|", " ").split())
            for target in rule["targets"].split():
                prerequisites[target] = names
    return Database(variables, prerequisites)


def missing_needs(database: Database) -> list[str]:
    """Each listed target's needs that make's database does not give it."""
    problems = []
    for target, needs in NEEDS.items():
        have = database.prerequisites.get(target)
        if have is None:
            problems.append(f"{target}: no such target in make's database")
            continue
        for need in needs:
            variable = database.variables.get(need)
            if variable is None:
                problems.append(f"{target} needs $({need}), which the Makefile does not define")
            elif variable.value not in have:
                problems.append(
                    f"{target} needs $({need}) ({variable.value}), but make gives it only: "
                    f"{' '.join(have) or 'nothing'}"
                )
    return problems


def names_used_before_defined(makefile: Path, database: Database) -> list[str]:
    """Rules whose prerequisite list names a variable the Makefile defines further down:
    make expanded it to nothing (or to an earlier value) when it read the rule."""
    problems = []
    for number, line in enumerate(makefile.read_text().splitlines(), start=1):
        rule = RULE.match(line)
        if not rule or line.startswith("\t"):
            continue
        for reference in REFERENCE.finditer(rule["targets"] + " " + rule["prerequisites"]):
            variable = database.variables.get(reference["name"])
            if variable is not None and variable.line > number:
                problems.append(
                    f"{makefile.name}:{number}: $({reference['name']}) is used here but defined "
                    f"on line {variable.line}, so make read it as nothing"
                )
    return problems


def check(makefile: Path) -> list[str]:
    database = read_database(makefile)
    return missing_needs(database) + names_used_before_defined(makefile, database)


def main() -> int:
    makefile = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "Makefile"
    problems = check(makefile.resolve())
    for problem in problems:
        print(f"make prerequisites: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
