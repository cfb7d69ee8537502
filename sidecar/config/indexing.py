"""Where notes come from and how they are kept indexed: the vault, index and watch sections."""

from pathlib import Path

from sidecar.config.fields import _opt, section

DEFAULT_WIKI = "wiki"  # a vault without it is well: the wiki is optional


@section
class VaultConfig:
    path: Path | None = _opt(None, "The Obsidian vault folder (required to index notes).")
    wiki_subfolder: str = _opt(DEFAULT_WIKI, "Curated subfolder of the vault, indexed as source `wiki`.")


@section
class IndexConfig:
    rescan_minutes: float = _opt(10.0, "Full sweep interval in minutes.", min=0.1)
    max_file_bytes: int = _opt(
        5_000_000, "Notes larger than this are skipped (counted, and named in `sidecar status`).", min=1024
    )
    max_vector_chunks_per_note: int = _opt(
        2_000,
        "Chunks of one note that get vectors (search by meaning): the first this many, from the "
        "note's top; the rest of a longer note is found by keywords only, and `sidecar status` "
        "names such notes. A log appended at its end keeps vectors for its oldest part: its newest "
        "entries are the keyword-only ones (write it newest first, or one note per month). A chunk "
        "holds at most chunking.maxTokens (200) tokens, some 600-900 characters of prose: 2,000 "
        "chunks embed a note of about 1-1.5 MB of prose, or of 300 KB cut at every short heading (a "
        "journal, a log), whole; a 4.9 MB note cut into 8,764 chunks took an hour of embedding on "
        "two busy cores. Raised (then `sidecar reload`): the chunks past the old limit "
        "are embedded; lowered: vectors already computed are kept, none are computed past it.",
        min=1,
        max=10**7,
    )
    batch_files: int = _opt(128, "Notes written to the stores per batch during a sweep.", min=1, max=10_000)
    mass_deletion_share: float = _opt(
        0.5,
        "A sweep that finds more than this share of a root's notes gone (same mount, not empty) holds "
        "the deletions for massDeletionHoldMinutes, or until `sidecar index --confirm-deletions ROOT`.",
        min=0.0,
        max=1.0,
    )
    mass_deletion_hold_minutes: float = _opt(
        360.0,
        "Wall-clock time a mass deletion stays held before it is applied (an emptied, unmounted or "
        "replaced share is held for as long as it stays so, whatever this says).",
        min=0.0,
    )
    mass_deletion_quiet_seconds: float = _opt(
        2.0,
        "Deletions of more than a few notes seen by file events, that no move explains, are judged once "
        "their root had no deletion or new note for this long (a branch switch deletes first and "
        "writes after: judged whole, with the notes that came in).",
        min=0.1,
        max=60.0,
    )
    keep_deleted_vectors_hours: float = _opt(
        168.0,
        "Vectors of deleted chunks are kept this long, by text: a note that comes back is not re-embedded.",
        min=0.0,
    )
    keep_deleted_vectors_max: int = _opt(
        20_000,
        "At most this many kept vectors of deleted chunks (those an edit replaced go first, then the "
        "oldest; an edited note's are kept for its last 3 edits only).",
        min=0,
        max=10**7,
    )
    optimize_minutes: float = _opt(
        60.0,
        "Compact the vector table (and drop old versions) this often, and rewrite each keyword index "
        "whose deleted notes weigh in its scores.",
        min=1.0,
    )
    optimize_every_writes: int = _opt(
        100, "Also compact after this many vector writes (0: only on the schedule).", min=0, max=1_000_000
    )
    exclude: tuple[str, ...] = _opt(
        (),
        "Notes to leave out, as gitignore patterns relative to the vault (e.g. [Templates/, "
        "Archive/, '*.excalidraw.md']); newly excluded notes leave the index when the reload that "
        "brings the pattern answers (or at a start, before the first sweep).",
    )
    obsidian_excludes: bool = _opt(
        True, "Also leave out what Obsidian's 'Excluded files' setting (.obsidian/app.json) names."
    )
    obsidian_templates: bool = _opt(
        True,
        "Also leave out the templates folder (Templates plugin: .obsidian/templates.json; Templater): "
        "a template is never what you did or wrote. false: index it as notes.",
    )


@section
class WatchConfig:
    events: bool = _opt(True, "Use file events (inotify/FSEvents); false: sweeps and polling only.")
    debounce_ms: int = _opt(
        300, "File events are collected this long before a sweep runs.", min=0, max=60_000
    )
    poll_seconds: float = _opt(
        60.0,
        "Stat sweep interval for roots on network shares (no file events arrive from other machines).",
        min=1.0,
    )
    retry_base_seconds: float = _opt(30.0, "First retry of an unreachable root; doubles each time.", min=0.1)
    retry_max_seconds: float = _opt(600.0, "Longest wait between retries of an unreachable root.", min=1.0)
    fault_retry_max_seconds: float = _opt(
        5.0, "Longest wait before an index update that failed (disk full, read-only) is tried again.", min=0.1
    )
    probe_timeout_seconds: float = _opt(
        10.0,
        "A root whose listing, or one listing, stat or read in it, takes longer is treated as "
        "unreachable (hung share).",
        min=0.1,
    )
    scan_timeout_seconds: float = _opt(600.0, "Longest a full scan of one root may take.", min=1.0)
    mount_table: Path | None = _opt(
        None, "Mount table to read filesystem types from (default /proc/self/mountinfo; macOS: mount)."
    )
    fstab: Path | None = _opt(
        None,
        "File-system table naming the mount points of shares (default /etc/fstab): a home below one "
        "that is not mounted is not recorded as the home.",
    )
