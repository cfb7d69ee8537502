"""The same index gives the same answer in whatever process serves it: the daemon that built and
changed it, and the same build started again on the same home (a real daemon, real stores, the
real model)."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from tests.conftest import write

MODEL = {"SIDECAR_EMBEDDER_MODEL": "all-MiniLM-L6-v2"}  # the faster of the two built-in models
WORDS = [
    *("garden", "boat", "engine", "bread", "backup", "restic", "kayak", "paddle", "tomato"),
    *("propeller", "heat", "pump", "invoice", "tax", "roof", "gutter", "bicycle", "chain"),
    *("router", "firmware", "passport", "renewal", "dentist", "appointment"),
]
QUERIES = (
    "kayak paddle",
    "restic backup of the router firmware",
    "heat pump invoice",
    "bicycle chain",
    "passport renewal appointment",
    "roof gutter tomato",
)


def _notes(vault: Path, n: int) -> None:
    """``n`` notes of a paragraph or two each, more than the table needs for a centre (200 rows)."""
    rng = random.Random(11)
    for i in range(n):
        body = "\n\n".join(" ".join(rng.choice(WORDS) for _ in range(24)) for _ in range(rng.randint(1, 2)))
        write(vault / f"folder{i % 5}" / f"note-{i:03d}.md", f"# Note {i}\n\n{body}\n")


def _answers(d: Any) -> list[list[tuple[Any, ...]]]:
    """Every hit of every query, as a person and as an agent, with its scores and boosts."""
    out = []
    for agent in (None, "claude"):
        for query in QUERIES:
            hits = d.call("search", {"query": query, "limit": 10}, agent=agent)["hits"]
            out.append(
                [
                    (h["reference"], h["lines"], h["score"], h["vecScore"], h["bm25Score"], h["boosts"])
                    for h in hits
                ]
            )
    return out


def test_a_restart_gives_the_answers_of_the_daemon_that_built_and_changed_the_index(
    daemon_factory: Any, tmp_path: Path
) -> None:
    """Built, searched, changed (notes edited, deleted, added; memory written, edited, deleted),
    searched: the same build started again on the same home answers every query with the same
    hits and the same scores. The daemon that built the index kept the table's centre (hubness)
    of the rows of its first search, a fresh start took the changed rows': every score moved."""
    vault = tmp_path / "vault"
    _notes(vault, 240)
    d = daemon_factory(vault, env=MODEL).start(timeout=600)
    assert d.health()["index"]["chunks"] >= 200
    assert _answers(d)  # the first searches: the live state (centre, statistics) is taken now
    for i in (3, 17, 42, 77, 101):  # a few notes edited, deleted and added, within a tenth
        write(vault / f"folder{i % 5}" / f"note-{i:03d}.md", f"# Note {i}\n\nkayak paddle heat pump {i}\n")
    for i in (8, 55, 130):
        (vault / f"folder{i % 5}" / f"note-{i:03d}.md").unlink()
    for i in range(3):
        write(vault / "new" / f"added-{i}.md", f"# Added {i}\n\nrestic backup bicycle chain router {i}\n")
    d.call("write", {"slug": "pump", "content": "The heat pump invoice is paid."}, agent="claude")
    d.call("write", {"slug": "kayak", "content": "Kayak paddle in the loft."}, agent="claude")
    d.call("edit", {"slug": "kayak", "content": "Kayak paddle and boat engine in the loft."}, agent="claude")
    d.call("delete", {"slug": "pump"}, agent="claude")
    ticket = d.call("index", {})["ticket"]
    d.wait_for(
        lambda h: (
            h["index"]["asked_done"] >= ticket
            and h["index"]["state"] == "ready"
            and h["index"]["pending_vectors"] == 0
        ),
        timeout=300,
    )
    assert d.health()["index"]["files"] == 240 - 3 + 3 + 1
    live = _answers(d)
    assert any(h[5].get("hub") for hits in live for h in hits)  # hubness takes part
    d.stop()
    d.start(timeout=300)
    assert _answers(d) == live


def _segments(folder: Path) -> int:
    return len(json.loads((folder / "meta.json").read_text(encoding="utf-8"))["segments"])


def test_a_merge_that_ends_after_a_commit_is_searched_as_a_fresh_open_reads_it(tmp_path: Path) -> None:
    """Tantivy merges segments in the background after a commit; the merge's end drops deleted
    documents (other counts for BM25) and writes meta.json again. The daemon searched with the
    counts of the reload right after the commit until its next commit, a fresh open (a restart)
    with the merged ones: the same files, other scores."""
    from sidecar.stores.bm25 import Bm25Doc, Bm25Index

    rng = random.Random(5)

    def doc(i: int) -> Bm25Doc:
        body = " ".join(rng.choice(WORDS) for _ in range(200))
        return Bm25Doc.of(
            f"vault/n{i}#0", f"vault/n{i}", "vault", "", title=f"n{i}", aliases=(), headings=(), body=body
        )

    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    try:
        idx.add([doc(i) for i in range(3000)])  # a large first segment: its merge takes a while
        idx.commit()
        n, chunks, merged = 3000, path / "chunks", False
        while not merged:  # commits of a few notes, deleting others, until one ended in a merge
            before = _segments(chunks)
            idx.add([doc(n + k) for k in range(100)])
            for _ in range(20):
                idx.delete_key(f"vault/n{rng.randrange(n)}")
            idx.commit()
            n += 100
            assert n < 3000 + 100 * 40, "no merge of the keyword index"
            deadline = time.monotonic() + 60  # a merge that began: wait for its end
            while _segments(chunks) >= 8 and time.monotonic() < deadline:
                time.sleep(0.05)
            merged = _segments(chunks) <= before
        # Another merge may still run and end between the two searches (the live index then
        # reads its files, the fresh open not): compared only where meta.json stayed the same.
        for _ in range(50):
            seen = (chunks / "meta.json").read_bytes()
            fresh = Bm25Index(path, read_only=True)
            try:
                pairs = [(idx.search(query, 20), fresh.search(query, 20)) for query in QUERIES]
            finally:
                fresh.close()
            if (chunks / "meta.json").read_bytes() == seen:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the keyword index's meta.json kept changing")
        for live, reopened in pairs:
            assert live == reopened
    finally:
        idx.close()


def test_a_note_read_again_unchanged_leaves_its_page_as_it_was(tmp_path: Path) -> None:
    """A note read again with nothing changed (every chunk held, none stale), as a start reads
    again the notes written from file events since the last whole sweep, keeps its page document.
    Written anew, the deleted copy counted in the page index's BM25 statistics until a merge: after
    200 edits of 40 notes of a real vault, the restarted daemon's page scores differed in 279 of
    280 answers (the order in 173) from those of the daemon that made the edits."""
    from sidecar.stores.bm25 import Bm25Doc, Bm25Index

    rng = random.Random(7)
    notes = {
        f"vault/n{i}": [
            Bm25Doc.of(
                f"vault/n{i}#{k}",
                f"vault/n{i}",
                "vault",
                "",
                title=f"n{i}",
                aliases=("boat",),
                headings=(f"Part {k}",),
                body=" ".join(rng.choice(WORDS) for _ in range(30)),
            )
            for k in range(2)
        ]
        for i in range(12)
    }
    path = tmp_path / "bm25"
    idx = Bm25Index(path)
    try:
        for key, docs in notes.items():
            idx.replace_note(key, docs)
        idx.commit()
        pages = (path / "pages" / "meta.json").read_bytes()
        before = [idx.search_pages(query, 20) for query in QUERIES]
        for key, docs in list(notes.items())[:5]:
            idx.replace_note(key, docs, held={d.chunk_id for d in docs})
        idx.commit()
        assert (path / "pages" / "meta.json").read_bytes() == pages  # no page deleted or added
        assert [idx.search_pages(query, 20) for query in QUERIES] == before
        # One chunk changed: the page is written anew (and found by its new words).
        key, docs = next(iter(notes.items()))
        changed = [
            docs[0],
            Bm25Doc.of(
                f"{key}#9", key, "vault", "", title="n0", aliases=("boat",), headings=(), body="zeppelin"
            ),
        ]
        idx.replace_note(key, changed, held={docs[0].chunk_id}, stale={docs[1].chunk_id})
        idx.commit()
        assert [k for k, _ in idx.search_pages("zeppelin", 5)] == [key]
    finally:
        idx.close()


def test_a_vector_tables_centre_is_kept_with_the_table(tmp_path: Path) -> None:
    """The centre for hubness is kept beside the table: a new open of the same files, after
    rows changed by less than a tenth, gives every hit the hubness the first one gave (it took
    its own from the changed rows before); a damaged record is taken again from the rows, and
    an emptied table forgets it."""
    import numpy as np

    from sidecar.stores.centre import CENTRE_RECORD
    from sidecar.stores.vectors import VectorStore

    dim, rng = 16, np.random.default_rng(2)
    vecs = rng.standard_normal((300, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    folder = tmp_path / "vectors"
    store = VectorStore(folder, "test@1", dim, "mean")
    store.add([(f"c{i}", f"vault/n{i}", "vault", "") for i in range(300)], vecs)
    query = vecs[7]
    store.search(query, 10)  # the centre is taken now, of these 300 rows
    store.delete_keys([f"vault/n{i}" for i in range(10)])
    store.add([(f"d{i}", f"vault/d{i}", "vault", "") for i in range(10)], -vecs[:10])
    live = store.search(query, 20)
    record = folder / f"{store.name}.lance" / CENTRE_RECORD
    assert record.is_file()

    again = VectorStore(folder, "test@1", dim, "mean")
    assert again.search(query, 20) == live
    record.write_text("{not json", encoding="utf-8")
    third = VectorStore(folder, "test@1", dim, "mean")
    assert [c for c, _, _ in third.search(query, 20)] == [c for c, _, _ in live]  # cosines alike
    assert third.search(query, 20) != live  # the changed rows' own centre
    assert json.loads(record.read_text(encoding="utf-8"))["rows"] == 300  # written anew
    third.clear()
    assert not record.exists()


def _cluster(rng: Any, n: int, dim: int, at: float) -> Any:
    """``n`` unit vectors around a point of the first axis (``at``): another ``at``, other content."""
    import numpy as np

    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    vecs[:, 0] += at
    return (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)


def test_a_centre_is_taken_again_once_a_tenth_of_its_rows_turned_over(tmp_path: Path) -> None:
    """Rows deleted and added one for one leave the row count as it was: the centre is taken
    again once the rows added and deleted since reach a tenth (it kept the centre of rows long
    gone for good before). The count is kept with the centre: a process that opened the table
    in between counts on from it, and a fresh open after that answers as it does."""
    import numpy as np

    from sidecar.stores.centre import CENTRE_RECORD
    from sidecar.stores.vectors import VectorStore

    dim, rng = 16, np.random.default_rng(4)
    folder = tmp_path / "vectors"
    first = VectorStore(folder, "test@1", dim, "mean")
    first.add([(f"a{i}", f"vault/a{i}", "vault", "") for i in range(300)], _cluster(rng, 300, dim, 3.0))
    query = _cluster(rng, 1, dim, -3.0)[0]
    first.search(query, 10)  # the centre of these 300 rows is taken now
    record = folder / f"{first.name}.lance" / CENTRE_RECORD

    def kept() -> dict[str, Any]:
        return dict(json.loads(record.read_text(encoding="utf-8")))

    taken = kept()["centre"]
    # 20 rows of other content for 20 of the first: under a tenth, the centre stays
    first.delete_keys([f"vault/a{i}" for i in range(10)])
    first.add([(f"b{i}", f"vault/b{i}", "vault", "") for i in range(10)], _cluster(rng, 10, dim, -3.0))
    first.search(query, 10)
    assert kept()["centre"] == taken
    counted = kept().get("churn")

    second = VectorStore(folder, "test@1", dim, "mean")  # a restart counts on from there
    second.delete_keys([f"vault/a{i}" for i in range(10, 15)])
    second.add([(f"c{i}", f"vault/c{i}", "vault", "") for i in range(5)], _cluster(rng, 5, dim, -3.0))
    assert second.count() == 300
    live = second.search(query, 20)  # a tenth turned over: taken again, of the rows as they are
    assert kept()["centre"] != taken
    assert (counted, kept()["rows"], kept()["churn"]) == (20, 300, 0)
    assert VectorStore(folder, "test@1", dim, "mean").search(query, 20) == live


def test_a_rebuilt_table_searched_answers_as_a_restart_does(tmp_path: Path) -> None:
    """A rebuild empties the table and refills it: the old rows' centre goes from memory too, not
    only its record, so a later write does not keep it again; the refilled rows' own centre is
    taken at the first search, and a restart answers the same."""
    import numpy as np

    from sidecar.stores.centre import CENTRE_RECORD
    from sidecar.stores.vectors import VectorStore

    dim, rng = 16, np.random.default_rng(6)
    folder = tmp_path / "vectors"
    store = VectorStore(folder, "test@1", dim, "mean")
    store.add([(f"a{i}", f"vault/a{i}", "vault", "") for i in range(300)], _cluster(rng, 300, dim, 3.0))
    query = _cluster(rng, 1, dim, -3.0)[0]
    store.search(query, 10)
    record = folder / f"{store.name}.lance" / CENTRE_RECORD
    assert record.is_file()
    store.clear()
    store.add([(f"b{i}", f"vault/b{i}", "vault", "") for i in range(290)], _cluster(rng, 290, dim, -3.0))
    assert not record.exists()  # no centre of the old rows kept again by the refill
    live = store.search(query, 20)
    assert json.loads(record.read_text(encoding="utf-8"))["rows"] == 290
    assert VectorStore(folder, "test@1", dim, "mean").search(query, 20) == live


def test_a_centre_that_cannot_be_kept_leaves_nothing_behind(tmp_path: Path, caplog: Any) -> None:
    """A record whose write fails (here: a folder stands at its name) is logged and leaves no
    temporary file in the table's folder; one whose table's folder is gone (dropped) does not
    make that folder again."""
    import numpy as np

    from sidecar.stores.centre import Centre, write_centre

    folder = tmp_path / "t.lance"
    (folder / "sidecar-centre.json").mkdir(parents=True)
    (folder / "sidecar-centre.json" / "x").write_text("x", encoding="utf-8")
    centre = Centre(300, 0, np.ones(4, dtype=np.float32))
    with caplog.at_level("WARNING", logger="sidecar.stores.vectors"):
        write_centre(folder / "sidecar-centre.json", centre, "t")
    assert "vector_centre_not_kept" in caplog.text
    assert sorted(p.name for p in folder.iterdir()) == ["sidecar-centre.json"]
    gone = tmp_path / "dropped.lance"
    write_centre(gone / "sidecar-centre.json", centre, "t")
    assert not gone.exists()


def test_a_centres_churn_is_kept_in_steps_not_at_every_write(tmp_path: Path, monkeypatch: Any) -> None:
    """Small writes count their churn in memory: the centre's record is written again once the
    count grew by a hundredth of its rows (and at a compaction or a stop), not at every add and
    delete (10-15 ms each under load, for the count alone). A process killed before that loses
    less than a hundredth of the rows' churn; one stopped loses none, and a fresh open then
    counts on from it with the same centre."""
    import numpy as np

    from sidecar.stores import vectors as vectors_module
    from sidecar.stores.centre import CENTRE_RECORD
    from sidecar.stores.vectors import VectorStore

    dim, rng, rows = 16, np.random.default_rng(8), 1000
    folder = tmp_path / "vectors"
    store = VectorStore(folder, "test@1", dim, "mean", optimize_every=0)
    store.add([(f"a{i}", f"vault/a{i}", "vault", "") for i in range(rows)], _cluster(rng, rows, dim, 3.0))
    query = _cluster(rng, 1, dim, -3.0)[0]
    store.search(query, 10)  # the centre of these rows is taken (and written) now
    record = folder / f"{store.name}.lance" / CENTRE_RECORD
    written: list[int] = []
    keep = vectors_module.write_centre

    def counted(path: Path, centre: Any, table: str) -> None:
        written.append(centre.churn)
        keep(path, centre, table)

    monkeypatch.setattr(vectors_module, "write_centre", counted)
    for i in range(12):  # a note of one chunk edited twelve times: 24 rows added and deleted
        store.delete_keys([f"vault/a{i}"])
        store.add([(f"b{i}", f"vault/a{i}", "vault", "")], _cluster(rng, 1, dim, 3.0))
    live = store.search(query, 20)
    assert written == [10, 20]  # each time a hundredth of the 1,000 rows was counted
    kept = json.loads(record.read_text(encoding="utf-8"))
    assert (kept["rows"], kept["churn"]) == (rows, 20)  # a kill now: 4 of 24 lost, under 10
    assert VectorStore(folder, "test@1", dim, "mean").search(query, 20) == live  # the same centre

    store.keep_centre()  # as the stores' close at a stop does
    assert json.loads(record.read_text(encoding="utf-8"))["churn"] == 24
    store.keep_centre()
    assert written == [10, 20, 24]  # nothing new counted: not written again
    again = VectorStore(folder, "test@1", dim, "mean")
    assert again.search(query, 20) == live
    again.delete_keys([f"vault/a{i}" for i in range(20, 96)])  # 24 + 76: a tenth of the rows
    assert json.loads(record.read_text(encoding="utf-8"))["churn"] == 100  # due: kept at once


def test_a_stop_keeps_the_churn_counted_since_the_centre_was_written(make_cfg: Any, tmp_path: Path) -> None:
    """The stores' close (a daemon's stop) writes the churn the serving table counted in memory:
    a restart after a clean stop counts on from every row written."""
    from sidecar.stores.centre import CENTRE_RECORD, read_centre
    from tests.conftest import FakeEmbedder, Harness

    vault = tmp_path / "vault"
    for i in range(220):
        write(vault / f"n{i:03d}.md", f"# Note {i}\n\nword{i} and some text of note {i}\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        assert h.stores.serving is not None
        store = h.stores.serving.store
        assert store.centroid() is not None  # taken of the rows, written
        write(vault / "n005.md", "# Note 5\n\nedited\n")
        h.sweep()
        record = store.path / f"{store.name}.lance" / CENTRE_RECORD
        before = read_centre(record, store.dim)
        assert before is not None and before.churn == 0  # two rows counted: in memory only
    finally:
        h.close()
    after = read_centre(record, store.dim)
    assert after is not None and after.churn == 2 and after.rows == before.rows
    assert (after.mean == before.mean).all()
