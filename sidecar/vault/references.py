"""References and keys. A *key* names a note inside the index and is unique across agents:
``vault/<path>``, ``wiki/<path>``, ``memory/<agent>/<slug>`` (paths without ``.md``; a Canvas
keeps its ``.canvas``: ``vault/Plan.canvas``, as Obsidian names it beside a ``Plan.md``). The
*reference* a client sees is the key, except that an agent sees its own memory as
``memory/<slug>``. A client's reference is checked before it becomes a key, and the file behind
a key by the rules of ``scan``. Imports ``config``, ``contracts``, ``canvas``, ``sources`` and
``notenames``."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from sidecar.config import Config, valid_agent
from sidecar.contracts.errors import NotFoundError, SourceError, UnreadableError
from sidecar.contracts.printable import quoted
from sidecar.contracts.wire import SOURCES
from sidecar.vault.canvas import is_canvas_name
from sidecar.vault.notenames import SLUG_RE
from sidecar.vault.sources import Root, agent_inbox, inbox_refusal, link_refusal, root_refusal


def public_reference(key: str, agent: str | None) -> str:
    """What a client sees: an agent's own memory is ``memory/<slug>``."""
    if agent and key.startswith(f"memory/{agent}/"):
        return "memory/" + key[len(f"memory/{agent}/") :]
    return key


def key_for_reference(reference: str, agent: str | None) -> str:
    """Validate a client's reference and return the index key; refuse anything that could escape.

    Refused: NUL bytes, absolute paths, ``..`` or ``.`` segments, empty segments, unknown
    sources, another agent's memory, vault paths inside the wiki or dot-folders. A reference is
    the note's path with ``/`` between folders and no escaping: every other character (a
    backslash too) is part of a name, so each reference search returns is accepted here.
    """
    if not isinstance(reference, str) or not reference:
        raise SourceError("reference is empty")
    if "\0" in reference:
        raise SourceError("reference contains a NUL byte")
    if reference.startswith("/") or re.match(r"^[A-Za-z]:", reference):
        raise SourceError(
            f"reference {quoted(reference)} is an absolute path; use a reference returned by search"
        )
    ref = reference[:-3] if reference.lower().endswith(".md") else reference
    parts = ref.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise SourceError(f"reference {quoted(reference)} leaves its root or has empty segments")
    if any(p.startswith(".") for p in parts):
        raise SourceError(f"reference {quoted(reference)} points into a hidden folder")
    source = parts[0]
    if source not in SOURCES or len(parts) < 2:
        raise SourceError(f"reference {quoted(reference)} must start with vault/, wiki/ or memory/")
    if source == "memory":
        if agent is not None:
            # memory/<slug> is the agent's own; memory/<agent>/<slug> (as the CLI prints it) too.
            if len(parts) == 3 and parts[1] == agent:
                parts = [parts[0], parts[2]]
            if len(parts) != 2:
                raise SourceError(
                    f"reference {quoted(reference)}: memory references are memory/<slug> (your own notes)"
                )
            owner, slug = agent, parts[1]
        else:
            if len(parts) != 3:
                raise SourceError(
                    f"reference {quoted(reference)}: without an agent, use memory/<agent>/<slug> "
                    "(or name the agent: --agent NAME)"
                )
            owner, slug = parts[1], parts[2]
        if not valid_agent(owner):
            raise SourceError(f"reference {quoted(reference)}: invalid agent name")
        if not SLUG_RE.fullmatch(slug):
            raise SourceError(f"reference {quoted(reference)}: invalid slug")
        return f"memory/{owner}/{slug}"
    return "/".join(parts)


def path_for_key(cfg: Config, key: str, rel: str | None = None) -> tuple[Root, Path]:
    """The file behind a key, checked by the rules of ``scan``: a vault or wiki note (or its
    symlink target) must lie inside its root and outside dot-folders; a memory note must be in a
    private inbox and is never a symlink (it is then read with ``read_inbox_note``). ``rel``: the
    file name the index recorded for the key (``Note.MD``, ``a.md.md``), else ``<path>.md``."""
    source, rest = key.split("/", 1)
    if source == "memory":
        agent, slug = rest.split("/", 1)
        root = Root("memory", agent_inbox(cfg, agent), agent=agent)
        refusal = inbox_refusal(root)
        if refusal is not None:
            raise UnreadableError(f"{quoted(key)}: {refusal}")
        path = root.path / f"{slug}.md"
        try:
            st = path.lstat()
        except FileNotFoundError as exc:
            raise NotFoundError(f"no note {quoted(key)}") from exc
        except OSError as exc:
            raise UnreadableError(f"{quoted(key)} cannot be read: {exc.strerror}") from exc
        if stat.S_ISLNK(st.st_mode):
            raise UnreadableError(f"{quoted(key)} is a symbolic link in a memory inbox; refused")
        return root, path
    if cfg.vault.path is None:
        raise NotFoundError("no vault is configured")
    wiki = cfg.vault.wiki_subfolder
    if source == "wiki":
        root = Root("wiki", cfg.vault.path / wiki, within=cfg.vault.path)
        refusal = root_refusal(root)
        if refusal is not None:
            raise UnreadableError(f"{quoted(key)}: {refusal}; refused")
    else:
        if rest == wiki or rest.startswith(wiki + "/"):
            raise SourceError(f"{quoted(key)} lies in the wiki; use wiki/{rest[len(wiki) + 1 :]}")
        root = Root("vault", cfg.vault.path, exclude=wiki)
    # A canvas's key names its file, unless a Markdown note "<name>.canvas.md" has that key.
    markdown = is_canvas_name(rest) and not os.path.lexists(root.path / f"{rest}.md")
    named = rest if markdown else f"{rest}.md"
    path = root.path / (rel if rel is not None and root.key_of(rel) == key else named)
    try:
        resolved = path.resolve(strict=True)
        base = root.path.resolve(strict=True)
    except FileNotFoundError as exc:
        raise NotFoundError(f"no note {quoted(key)}") from exc
    except (OSError, RuntimeError) as exc:
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else "a symlink loop"
        raise UnreadableError(f"{quoted(key)} cannot be resolved ({cause})") from exc
    if not resolved.is_relative_to(base):
        raise UnreadableError(f"{quoted(key)} resolves outside its root; refused")
    if path.is_symlink() or resolved != path.absolute():
        why = link_refusal(root, path, base)
        if why is not None:
            raise UnreadableError(f"{quoted(key)}: {why}; refused")
    return root, resolved
