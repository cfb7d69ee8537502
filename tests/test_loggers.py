"""Every module-level logger is used: a logger left behind by a cut (its logging calls moved to
another module that keeps its name) reads as if the module logged, and hides where a line comes
from."""

from __future__ import annotations

import ast
from pathlib import Path

import sidecar

PACKAGE = Path(sidecar.__file__).parent


def _unused_loggers() -> list[str]:
    out: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {
            t.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) == "logging.getLogger"
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        out += [f"{path.relative_to(PACKAGE)}: {name}" for name in sorted(defined - used)]
    return out


def test_every_module_logger_is_used() -> None:
    """A module that defines ``log = logging.getLogger(...)`` logs through it."""
    assert _unused_loggers() == []
