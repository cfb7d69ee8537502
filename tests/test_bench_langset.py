"""The multilingual labeled set's harness (bench/eval.py): a permalink section copied in every
language, the translations of an expected page found by permalink, and the share of the
question's language in the top ten. Small hand-made vaults; no daemon."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def ev() -> ModuleType:
    """bench/eval.py as a module (it imports its sibling ``common``)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_eval", BENCH / "eval.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def _note(root: Path, rel: str, link: str | None, body: str = "text") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    head = f"---\naliases:\n  - x\npermalink: {link}\n---\n" if link is not None else ""
    path.write_text(head + body + "\n", encoding="utf-8")


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    """Three languages of a two-page section, one page outside it, one note without front matter."""
    root = tmp_path / "src"
    _note(root, "en/Teams/License.md", "teams/license")
    _note(root, "en/Teams/Teams.md", "teams")
    _note(root, "en/Sync/Plans.md", "sync/plans")
    _note(root, "de/Teams/Lizenz.md", "teams/license")
    _note(root, "de/Teams/Teams.md", "teams")
    _note(root, "ja/チーム/商用ライセンス.md", "teams/license")
    _note(root, "ja/チーム/チーム.md", "teams")
    _note(root, "ja/teamsnotes.md", "teamsnotes")  # a longer permalink is not under "teams/"
    _note(root, "Sandbox/Loose.md", None)
    return root


def test_permalink_section_copies_the_section_in_every_language(
    ev: ModuleType, vault: Path, tmp_path: Path
) -> None:
    """--permalink teams copies exactly the notes whose permalink is teams or under teams/."""
    work = tmp_path / "work"
    built = ev.build_vault([str(vault)], "", work, section="teams")
    got = sorted(p.relative_to(built).as_posix() for p in built.rglob("*.md"))
    assert got == [
        "de/Teams/Lizenz.md",
        "de/Teams/Teams.md",
        "en/Teams/License.md",
        "en/Teams/Teams.md",
        "ja/チーム/チーム.md",
        "ja/チーム/商用ライセンス.md",
    ]


def test_translations_are_the_same_permalink_in_other_languages(ev: ModuleType, vault: Path) -> None:
    """An expected German page's translations are the en and ja notes of its permalink, not itself."""
    got = ev.translations_of(vault, ["vault/de/Teams/Lizenz"])
    assert got == {"vault/en/Teams/License", "vault/ja/チーム/商用ライセンス"}


def test_language_share_counts_the_question_language_in_the_top_ten(ev: ModuleType) -> None:
    """Share of the first ten references whose first folder is the question's language."""
    ranked = ["vault/de/a", "vault/en/a", "vault/de/b", "vault/ja/a"] + [f"vault/fr/{i}" for i in range(8)]
    assert ev.language_share(ranked, "de") == pytest.approx(0.2)
    assert ev.language_share([], "de") == 1.0


def test_language_figures_average_share_and_translations(ev: ModuleType) -> None:
    """lang@10 and translations@10 are means over the questions that have a language."""
    rankings = {"0": ["vault/de/a", "vault/en/a"], "1": ["vault/ja/x", "vault/ja/y"]}
    translations = {"0": {"vault/en/a"}, "1": set()}
    got = ev.language_figures(rankings, {"0": "de", "1": "ja"}, translations)
    assert got == {"lang@10": 0.75, "translations@10": 0.5}
