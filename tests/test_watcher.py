"""The file watcher over a real folder: each debounced batch names its paths and those it only
deleted, so a deletion is told from an editor's save that replaces the file."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.vault.watcher import Watcher


class Batches:
    def __init__(self) -> None:
        self.paths: set[str] = set()
        self.gone: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, paths: set[str], gone: frozenset[str]) -> None:
        with self.lock:
            self.paths |= paths
            self.gone |= gone

    def wait_for(self, path: Path, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while str(path) not in self.paths:
            assert time.monotonic() < deadline, f"no event for {path}"
            time.sleep(0.05)


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Path, Batches]]:
    folder = tmp_path / "vault"
    folder.mkdir()
    batches = Batches()
    stop = threading.Event()
    watcher = Watcher([folder], batches, stop, debounce_ms=100)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not watcher.watching:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)  # the notify watch is set up after ``watching`` is
    yield folder, batches
    stop.set()
    thread.join(10)


def test_a_deletion_and_a_rename_name_the_old_path_gone(watched: tuple[Path, Batches]) -> None:
    folder, batches = watched
    note, other = folder / "Note.md", folder / "Other.md"
    note.write_text("# Note\n")
    other.write_text("# Other\n")
    batches.wait_for(other)
    note.unlink()
    other.rename(folder / "Renamed.md")
    batches.wait_for(folder / "Renamed.md")
    batches.wait_for(note)
    with batches.lock:
        assert {str(note), str(other)} <= batches.gone
        assert str(folder / "Renamed.md") not in batches.gone


def test_a_save_that_replaces_the_file_is_not_a_deletion(watched: tuple[Path, Batches]) -> None:
    folder, batches = watched
    note = folder / "Note.md"
    note.write_text("# Note\n")
    batches.wait_for(note)
    time.sleep(0.3)
    with batches.lock:
        batches.paths.clear()
    tmp = folder / "Note.md.tmp"  # written aside, then renamed over (editors, sync tools)
    tmp.write_text("# Note\n\nsaved again\n")
    os.replace(tmp, note)
    batches.wait_for(note)
    with batches.lock:
        assert str(note) not in batches.gone
