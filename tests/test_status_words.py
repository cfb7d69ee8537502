"""What status and errors say at the index's limits: a note too large names its size and
index.maxFileBytes, status names the skipped files, a long reference is cut in its error, a new
inbox is not "listed never", a re-cut keeps the counts, and a wait for the model's tokenizer is
said. Real stores and a real socket in this process."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sidecar.clients.cli_render import render_status
from sidecar.contracts.errors import RemoteError, SidecarError
from sidecar.model.embedder import EmbedderSlot
from tests.conftest import KEYWORD_ONLY, Harness, write
from tests.in_process import InProcessServer
from tests.index_helpers import index_loop_of

Serve = Callable[..., InProcessServer]
BIG = 3_000  # bytes of the note over a limit of 1,024


def test_get_of_a_note_too_large_names_its_size_and_the_limit(serve_in_process: Serve, vault: Path) -> None:
    """`get` said "cannot be read: too large" with neither the limit nor the size."""
    write(vault / "Big.md", "# Big\n\n" + "x" * (BIG - 7))
    server = serve_in_process(vault, model=KEYWORD_ONLY, **{"index.maxFileBytes": 1024})
    with pytest.raises(RemoteError) as err:
        server.call("get", {"reference": "vault/Big"})
    assert err.value.code == "unreadable"
    assert "'vault/Big' cannot be read: too large: 3,000 bytes, over index.maxFileBytes (1,024 bytes)" in str(
        err.value
    )


def test_status_names_the_skipped_files_and_the_size_limit(serve_in_process: Serve, vault: Path) -> None:
    """status said "Skipped files: 1 too large": now the limit and the files, with their size;
    health keeps counting by the same reasons and lists the files (bounded)."""
    write(vault / "Big.md", "# Big\n\n" + "x" * (BIG - 7))
    server = serve_in_process(vault, model=KEYWORD_ONLY, **{"index.maxFileBytes": 1024})
    health = server.call("health")
    idx = health["index"]
    assert idx["skipped"] == {"too large": 1}
    assert idx["skipped_files"] == [{"reference": "vault/Big", "reason": "too large", "bytes": BIG}]
    assert idx["max_file_bytes"] == 1024
    text = render_status(health)
    said = "Skipped files: 1 too large (over index.maxFileBytes, 1,024 bytes)\n  vault/Big (3,000 bytes)\n"
    assert said in text


def test_many_skipped_files_are_named_a_few_then_counted(serve_in_process: Serve, vault: Path) -> None:
    """Five files too large: status names three and says how many more."""
    for i in range(5):
        write(vault / f"Big{i}.md", "# Big\n\n" + "x" * (BIG - 7))
    server = serve_in_process(vault, model=KEYWORD_ONLY, **{"index.maxFileBytes": 1024})
    text = render_status(server.call("health"))
    named = "vault/Big0 (3,000 bytes), vault/Big1 (3,000 bytes), vault/Big2 (3,000 bytes) and 2 more"
    assert f"\n  {named}\n" in text


def test_a_long_reference_is_cut_in_its_error(serve_in_process: Serve) -> None:
    """A reference of 8 KB was echoed whole in the one-line error; now its start and its length."""
    server = serve_in_process(model=KEYWORD_ONLY)
    reference = "vault/" + "a" * 8186
    with pytest.raises(SidecarError) as err:
        server.call("get", {"reference": reference})
    message = str(err.value)
    assert "(8,192 characters)" in message and len(message) < 400, message


def test_a_new_inbox_is_not_shown_as_listed_never(serve_in_process: Serve) -> None:
    """An inbox made by a memory write is indexed at once but listed only by the next sweep:
    status said "listed never" beside its indexed notes."""
    server = serve_in_process(model=KEYWORD_ONLY)
    server.call("write", {"slug": "kayak", "content": "The kayak paddle hangs in the loft."}, agent="tester")
    health = server.call("health")
    vault_root = next(r for r in health["roots"] if r["name"] == "vault")
    inbox = {**vault_root, "name": "memory/tester", "path": str(server.cfg.agents_dir / "tester/memory")}
    health["roots"].append(inbox)
    inbox["last_sweep"] = None  # as before the next sweep lists it
    text = render_status(health)
    assert "listed never" not in text
    assert "not listed yet (notes written through sidecar are indexed at once)" in text


def test_notes_written_again_stay_counted(harness: Harness) -> None:
    """A re-cut marks each batch's notes `indexing` while it writes them: status counted them
    out ("0 notes, 0 chunks"). Notes indexed before stay counted; a new one counts once it is in."""
    harness.sweep()
    manifest = harness.stores.manifest
    before = manifest.counts()
    keys = manifest.keys_in_state("indexed")
    manifest.mark_state(keys, "indexing")
    during = manifest.counts()
    assert (during["files"], during["chunks"]) == (before["files"], before["chunks"])
    assert during["by_source"] == before["by_source"]
    vault = harness.cfg.vault.path
    assert vault is not None
    manifest.mark_state(keys, "indexed")
    write(vault / "New.md", "# New\n\nA note being written.\n")
    from sidecar.stores.manifest_rows import FileRecord

    manifest.mark([FileRecord("vault/New", "vault", "", "New.md", 1, 10, "", "indexing")])
    assert manifest.counts()["files"] == before["files"]


def test_status_says_indexing_waits_for_the_models_tokenizer(
    make_cfg: Any, vault: Path, serve_in_process: Serve
) -> None:
    """Turned on over a keyword-only index, the model converts on the first start: notes wait
    for its tokenizer to be cut (up to a minute). Status said only "indexing 0/3 notes"."""
    h = Harness(make_cfg(vault), None)
    slot = EmbedderSlot()
    slot.set_loading()
    h.indexer.slot = slot
    try:
        sweep = threading.Thread(target=h.indexer.sweep)
        sweep.start()
        seen = threading.Event()
        for _ in range(600):  # the sweep reaches the wait within a few ms; bounded all the same
            if h.indexer.activity.tokenizer_wait_since is not None:
                seen.set()
                break
            threading.Event().wait(0.05)
        slot.set_failed("test: the model is off", state="off")
        sweep.join(60)
        assert seen.is_set() and h.indexer.activity.tokenizer_wait_since is None
    finally:
        h.close()
    health = serve_in_process(model=KEYWORD_ONLY).call("health")
    health["index"].update(
        state="building",
        phase="indexing",
        progress={"done": 0, "total": 3},
        tokenizer_wait_seconds=12.4,
        tokenizer_wait_max_seconds=60.0,
    )
    assert (
        "Index: building (indexing 0/3 notes; waiting 12 s for the model's tokenizer, which is being "
        "loaded or converted, to cut notes in its tokens (at most 60 s, then words are counted); "
        "search answers meanwhile)"
    ) in render_status(health)


def test_a_skipped_name_that_is_not_utf8_is_listed_escaped(serve_in_process: Serve, vault: Path) -> None:
    """A file name that does not decode is skipped; listing it by its key made health fail
    (JSON cannot carry the surrogates it decodes to): it is listed escaped."""
    import os

    with open(os.fsencode(vault) + b"/Caf\xe9.md", "wb") as fh:
        fh.write(b"# Cafe\n")
    health = serve_in_process(vault, model=KEYWORD_ONLY).call("health")
    listed = [f for f in health["index"]["skipped_files"] if f["reference"].startswith("vault/Caf")]
    assert listed == [{"reference": "vault/Caf\\udce9", "reason": listed[0]["reason"]}]
    assert "vault/Caf\\udce9" in render_status(health)


@pytest.mark.parametrize(
    ("error", "disk"),
    [
        ("updating the index failed: BM25 commit failed: Failed to open file for write: "
         "'FileAlreadyExists(\"4b5f2fd8.769.del\")' (retrying in 5 s)", False),
        ("updating the index failed: BM25 commit failed: No space left on device (os error 28)", True),
        ("indexing a memory write failed: BM25 commit failed: an index writer was killed "
         "(only 0.2 MB free on the index's disk: full?)", True),
        # a share's faults, and a writer killed by a full quota (`df` shows room: no hint)
        ("updating the index failed: BM25 commit failed: Input/output error (os error 5)", True),
        ("updating the index failed: BM25 commit failed: Stale file handle (os error 116)", True),
        ("updating the index failed: BM25 commit failed: an index writer was killed", True),
    ],
)  # fmt: skip
def test_the_to_do_of_an_index_problem_names_the_disk_only_when_the_error_does(
    serve_in_process: Serve, error: str, disk: bool
) -> None:
    """An index update failing for another cause than the disk (a leftover keyword index file)
    is not sent to free disk space; a full disk still is. Was: every index problem's To do said
    "check free disk space"."""
    from sidecar.index.problems import Problems

    health = serve_in_process(model=KEYWORD_ONLY).call("health")
    problems = Problems()
    problems.report("index", error)
    health["problems"] = problems.describe()
    text = render_status(health)
    assert ("check free disk space" in text) is disk
    assert ("not for lack of disk space" in text) is not disk


def test_the_to_do_of_an_immutable_index_names_chattr_not_the_disk(serve_in_process: Serve) -> None:
    """An index update or memory write refused for an immutable ``-shm`` (its words name the file
    and ``chattr -i``): the To do said "check free disk space and permissions of the home folder"
    (the home was fine). It says to lift the flag, neither the disk nor a rebuild."""
    from sidecar.index.problems import Problems
    from sidecar.stores.frozen import immutable_words

    health = serve_in_process(model=KEYWORD_ONLY).call("health")
    problems = Problems()
    problems.report("index", f"indexing a memory write failed: {immutable_words(Path('/h/index/m-shm'))}")
    problems.report("memory_write", f"ops: {immutable_words(Path('/h/index/m-shm'))}")
    health["problems"] = problems.describe()
    text = render_status(health)
    assert "/h/index/m-shm is immutable" in text, text
    assert "lift the immutable flag the Index or PROBLEM" in text, text
    assert "chattr -i" in text and "free disk space" not in text and "--rebuild" not in text, text


def test_a_failure_reported_during_work_that_went_well_is_not_cleared_by_it() -> None:
    """A memory write whose indexing failed (a full disk) while a sweep ran: the sweep's end
    clears only failures reported before it began, so the failure stays until work begun after
    it goes well. Was: cleared in the same millisecond it was raised, the disk still full."""
    from sidecar.index.problems import Problems

    problems = Problems()
    problems.report("index", "updating the index failed: disk full")
    sweep = problems.mark()
    problems.clear("index", since=sweep)  # reported before the sweep began: it cleared that
    assert problems.active_in("index") is None
    sweep = problems.mark()
    problems.report("index", "indexing a memory write failed: No space left on device")
    problems.clear("index", since=sweep)
    assert problems.active_in("index") is not None
    later = problems.mark()
    problems.clear("index", since=later)
    assert problems.active_in("index") is None
    assert [p["error"] for p in problems.describe()["recent"]][-1].startswith("indexing a memory write")


def test_a_rebuild_queued_behind_a_sweep_is_said_queued_with_the_sweeps_progress(
    serve_in_process: Serve, vault: Path
) -> None:
    """`sidecar index --rebuild` while a sweep of file changes runs: status said "a rebuild is
    under way: indexing 0/1 notes", the progress of that sweep, before the rebuild began. It says
    the rebuild is queued behind the sweep under way, and the progress is the rebuild's once it
    runs."""
    server = serve_in_process()
    h = server.harness
    loop = index_loop_of(server, rebuilds=True)
    write(vault / "Saved.md", "# Saved\n\nA note saved while the rebuild is asked.\n")
    reading, release = threading.Event(), threading.Event()
    index_files = h.indexer.index_files
    shown: list[str] = []

    def held(notes: Any, data: Any = None) -> int:
        if any(n.key == "vault/Saved" for n in notes) and not release.is_set():
            reading.set()  # the sweep of the file event is under way
            release.wait(30)
        elif release.is_set():
            shown.append(render_status(server.call("health")))  # the rebuild reads its notes
        return index_files(notes, data)

    h.indexer.index_files = held  # type: ignore[method-assign]
    sweep = threading.Thread(
        target=lambda: h.indexer.sweep(only=frozenset(), paths={str(vault / "Saved.md")}), daemon=True
    )
    sweep.start()
    assert reading.wait(30)
    assert server.call("index", {"rebuild": True})["ticket"] == 1
    queued = render_status(server.call("health"))
    release.set()
    sweep.join(30)
    assert "Index: ready; a rebuild is queued behind the sweep under way (indexing 0/1 notes)" in queued, (
        queued
    )
    assert "a rebuild is under way" not in queued
    assert "Vectors: computed for the notes as the rebuild reads them" not in queued
    job = loop._next()
    assert job is not None and job.rebuild
    loop._run(job)
    assert shown and "Index: building (a rebuild is under way: indexing 0/" in shown[0], shown
    assert "a rebuild is queued" not in shown[0]
    assert "a rebuild is" not in render_status(server.call("health"))


def test_a_sweep_listing_the_roots_is_not_scanning_0_of_0(serve_in_process: Serve) -> None:
    """A sweep lists its roots before it knows what to index or remove: status said "building
    (scanning 0/0 notes)" for a minute while 5,000 deletions were judged."""
    health = serve_in_process(model=KEYWORD_ONLY).call("health")
    health["index"].update(state="building", phase="scanning", progress={"done": 0, "total": 0})
    text = render_status(health)
    assert "Index: building (looking for changes in the notes)" in text and "0/0" not in text, text
    health["index"].update(phase="indexing", progress={"done": 3, "total": 40})
    assert "Index: building (indexing 3/40 notes)" in render_status(health)


@pytest.mark.parametrize("kind", ["unmounted", "device", "empty", "mass"])
def test_held_deletions_say_when_the_command_applies(serve_in_process: Serve, kind: str) -> None:
    """An unmounted share's held deletions stood beside "to apply them now: sidecar index
    --confirm-deletions vault": a person who wanted the PROBLEM gone ran it and emptied the index
    of a share that was merely away. It says to mount it again first; the command comes with its
    condition (not named at all, a vault that lives on another mount for good was held for ever
    with no way out shown)."""
    health = serve_in_process(model=KEYWORD_ONLY).call("health")
    (vault,) = [r for r in health["roots"] if r["name"] == "vault"]
    vault.update(
        mode="held" if kind == "mass" else "offline",
        held_deletions=926,
        hold={
            "kind": kind,
            "since": None,
            "applies_at": None,
            "confirm": "sidecar index --confirm-deletions vault",
        },
    )
    (line,) = [x for x in render_status(health).splitlines() if "926 deletions held" in x]
    if kind in ("unmounted", "device"):
        assert "mount it again, or wait for it (nothing is removed meanwhile); if its notes live on" in line
        assert line.endswith("from now on: sidecar index --confirm-deletions vault"), line
    else:
        assert line.endswith("sidecar index --confirm-deletions vault"), line


def test_one_chunk_left_to_a_model_switch_is_said_in_the_singular() -> None:
    from sidecar.clients.foreground import all_vectors_words

    one = all_vectors_words({"left_to_switch": 1, "pending_vectors": 1})
    assert one.startswith("1 chunk cut again for the model switch is found by keywords only"), one
    two = all_vectors_words({"left_to_switch": 2, "pending_vectors": 2})
    assert two.startswith("2 chunks cut again for the model switch are found"), two


def test_the_restart_status_advises_is_the_one_of_what_runs_the_daemon(serve_in_process: Serve) -> None:
    """A person's `sidecar serve` in a terminal answers while the service's daemon waits for it:
    "systemctl --user restart sidecar" returned at once and restarted the waiting daemon, not the
    one with the problem. Health says whether the service manager runs the daemon, and the
    advice names Ctrl-C and `sidecar serve` for one in a terminal."""
    from sidecar.index.problems import Problems

    health = serve_in_process(model=KEYWORD_ONLY).call("health")
    assert health["service"] is False  # no notify socket: run as a person's serve
    problems = Problems()
    problems.report("index", "updating the index failed: BM25 commit failed: a file left over")
    problems.report("stores", "the keyword index cannot be read")
    health["problems"] = problems.describe()
    text = " ".join(render_status(health).split())
    assert "systemctl --user restart sidecar" not in text, text
    assert text.count("Ctrl-C there, then `sidecar serve` again") == 2, text
    health["service"] = True
    text = " ".join(render_status(health).split())
    assert text.count("`systemctl --user restart sidecar`") == 2 and "Ctrl-C" not in text, text


def test_a_searchs_note_of_chunks_left_to_a_switch_names_both_causes() -> None:
    """Chunks left to a switch are cut again during it, or their vector was lost from the previous
    model's table: the note named the first only."""
    from sidecar.contracts.notices import switch_note

    assert switch_note(1).startswith(
        "1 chunk waits for the new model's vectors (cut again during the model switch, or whose "
        "vector was lost): found by words only"
    ), switch_note(1)
    assert switch_note(2).startswith("2 chunks wait for the new model's vectors (cut again"), switch_note(2)


def test_status_heads_with_the_daemons_build_as_doctor_does(serve_in_process: Serve) -> None:
    """status said only "sidecar 0.3.0" for every build of one release, so a person could not tell
    whether a restart after an upgrade took; it heads with the build the daemon runs, as
    `--version` and doctor say it (and health and `status --json` carry it as ``build``)."""
    from sidecar import __version__
    from sidecar.runtime.release import build_id

    server = serve_in_process(model=KEYWORD_ONLY)
    health = server.call("health")
    assert health["build"] == build_id(), health
    head = render_status(health).splitlines()[0]
    assert head.startswith(f"sidecar {__version__} (build {build_id()}): running since "), head
