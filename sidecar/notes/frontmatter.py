"""Front matter, the one parser: a note's YAML block as plain JSON values (dates as ISO text, a
node budget against alias bombs, a size cap), or the reason it cannot be read."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

_MAX_FRONT_MATTER = 64 * 1024
# libyaml's loader where PyYAML was built with it (its wheels are): the same safe subset, about
# ten times faster than the pure-Python one, which took 7 % of a first sweep.
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BASE_LOADER):  # type: ignore[misc]
    """The safe loader, with a date YAML cannot build ("2020-13-45") kept as the text it is:
    one bad value no longer costs the note its title, tags and aliases. A key given twice in one
    mapping is an error, as Obsidian's properties view has it: YAML loaders that take the last one
    lose the first value without a word (a second ``tags:`` line dropped the first's tags)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[tuple[str, str]] = set()
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue  # "<<" merges may be overridden on purpose
            name = (key.tag, key.value)
            if name in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key.value[:40]!r} given twice", key.start_mark
                )
            seen.add(name)
        return super().construct_mapping(node, deep)

    def construct_document(self, node: Any) -> Any:
        if isinstance(node, yaml.MappingNode):
            done: dict[int, Any] = {}
            node.value = [
                (key, _as_written(value, 2, done))
                if isinstance(key, yaml.ScalarNode) and key.value.lower() in _AS_WRITTEN
                else (key, value)
                for key, value in node.value
            ]
        return super().construct_document(node)


# The properties that hold names as the user typed them (any case, as ``property_value`` reads
# them): YAML 1.1 reads an unquoted ``010`` as 8, ``1e3`` as 1000.0, ``yes`` as true, and
# ``2024-01-01 10:00`` as a time written back in another form: an alias, tag or title nobody typed.
_AS_WRITTEN = frozenset({"aliases", "alias", "tags", "tag", "title"})
_STR, _NULL = "tag:yaml.org,2002:str", "tag:yaml.org,2002:null"


def _as_written(node: Any, depth: int, done: dict[int, Any]) -> Any:
    """An unquoted value of a name property, and the items of its list (and of a list in it: a
    link written unquoted, ``[[010]]``), as a node read as the text written; an empty value or
    ``null`` stays none. A new node where one changes: a node shared through a YAML anchor with
    another key (``date: &d 2024-01-01 10:00`` and ``title: *d``) keeps its reading there. Each
    node once (``done``: its id, the node it became): a list of aliases must not cost its square."""
    if id(node) in done:
        return done[id(node)]
    new = node
    if isinstance(node, yaml.ScalarNode):
        if not node.style and node.tag not in (_STR, _NULL):  # plain: no quotes, no | or >
            new = yaml.ScalarNode(_STR, node.value, node.start_mark, node.end_mark, node.style)
    elif isinstance(node, yaml.SequenceNode) and depth > 0:
        items = [_as_written(item, depth - 1, done) for item in node.value]
        if any(a is not b for a, b in zip(items, node.value, strict=True)):
            new = yaml.SequenceNode(node.tag, items, node.start_mark, node.end_mark, node.flow_style)
    done[id(node)] = new
    return new


def _timestamp(loader: Any, node: Any) -> Any:
    try:
        return loader.construct_yaml_timestamp(node)
    except ValueError:
        return loader.construct_scalar(node)


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp)
_LOADER = _Loader


def is_name_property(key: str) -> bool:
    """Whether a front matter key holds a note's names (``aliases``, ``alias``, ``tags``,
    ``tag``, ``title``, any case), read as the text written."""
    return key.lower() in _AS_WRITTEN


class Written(str):
    """A plain value of front matter kept as the text written (``12:30``, ``1.10``,
    ``2024-01-01``, ``yes``), for a writer that writes the block again: YAML 1.1 reads them as
    750, 1.1, a date and true, which a dump writes back otherwise (``zeit: 750``)."""

    __slots__ = ()


class _WrittenLoader(_Loader):
    """The loader, with a plain number, yes/no or time kept as the text written (``Written``)."""


def _keep_written(construct: Any) -> Any:
    def keep(loader: Any, node: Any) -> Any:
        # Plain, and of the type its text reads as (an explicit ``!!float 1`` is written otherwise).
        if not node.style and loader.resolve(yaml.ScalarNode, node.value, (True, False)) == node.tag:
            return Written(node.value)
        return construct(loader, node)

    return keep


for _tag, _construct in (
    ("int", _BASE_LOADER.construct_yaml_int),
    ("float", _BASE_LOADER.construct_yaml_float),
    ("bool", _BASE_LOADER.construct_yaml_bool),
    ("timestamp", _timestamp),
):
    _WrittenLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _keep_written(_construct))


class _Dumper(yaml.SafeDumper):
    """The safe dumper, with a ``Written`` value written back as it was written (unquoted)."""


def _represent_written(dumper: Any, data: Written) -> Any:
    return dumper.represent_scalar(dumper.resolve(yaml.ScalarNode, str(data), (True, False)), str(data))


_Dumper.add_representer(Written, _represent_written)


def dump_front_matter(front_matter: Mapping[str, Any]) -> str:
    """Front matter as YAML, in its keys' order; a ``Written`` value as it was written."""
    return str(yaml.dump(dict(front_matter), Dumper=_Dumper, sort_keys=False, allow_unicode=True))


# A block at the very start: "---" line, YAML, "---" line (what the inbox writes and reads back).
# Windows line ends too: an agent's text may come with them (notes read from disk are normalised).
# The first "---" line after the opening one closes it: "---/---" is an empty block, and a "---"
# after it is the body's rule (a greedy optional group took the second line as YAML and the third
# as the end, and the rule was lost); YAML lines after an empty block are body.
_BLOCK = re.compile(r"\A---[ \t]*\r?\n(.*?\r?\n)??---[ \t]*(?:\r?\n|\Z)", re.S)


def _json_safe(value: Any, budget: list[int]) -> Any:
    """Front matter as plain JSON values, with a node budget so a YAML alias bomb cannot explode."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueError("front matter is too large or too deeply aliased")
    if isinstance(value, dict):
        return {str(k): _json_safe(v, budget) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_json_safe(v, budget) for v in value]
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def parse_front_matter(raw: str, *, as_written: bool = False) -> tuple[dict[str, Any], str | None]:
    """Front matter as a dict, or ({}, reason) when it is not valid YAML or not a mapping.
    ``as_written``: a plain number, yes/no or time as ``Written`` text, to be written again."""
    if len(raw) > _MAX_FRONT_MATTER:
        return {}, "front matter larger than 64 KiB"
    try:
        loader = _WrittenLoader if as_written else _LOADER
        data = yaml.load(raw, Loader=loader)  # noqa: S506 - a safe loader, C or Python
        if data is None:
            return {}, None
        if not isinstance(data, dict):
            return {}, "front matter is not a mapping"
        safe = _json_safe(data, [10_000])
    except yaml.YAMLError as exc:
        return {}, f"invalid YAML in front matter: {str(exc).splitlines()[0]}"
    except (ValueError, RecursionError) as exc:
        return {}, str(exc) or "front matter too deep"
    return safe, None


def property_value(front_matter: Mapping[str, Any], *names: str) -> Any:
    """The value of the first of ``names`` the front matter gives, its key written in any case as
    Obsidian reads ``tags``/``aliases`` ("Tags:", "ALIASES:" from an import); a key written
    exactly as named wins over one in another case. None when none is given."""
    for name in names:
        if name in front_matter:
            return front_matter[name]
    folded: dict[str, Any] = {}
    for key, value in front_matter.items():
        folded.setdefault(str(key).lower(), value)
    for name in names:
        if name in folded:
            return folded[name]
    return None


def aliases_of(front_matter: Any) -> tuple[str, ...]:
    """A note's aliases as Obsidian reads them: ``aliases`` or ``alias`` (any case; ``alias`` is
    the name before Obsidian 1.4, still in older vaults), a list of names or one string of names
    separated by commas ("My Alias, Other" is two names; a space does not separate). A wiki-link
    written without quotes (``aliases: [[Bar]]``, or ``- [[Bar]]`` in a list), which YAML reads as
    a list of one list of one text, is the link's name, as when it is quoted. One reading for the
    sweep, the links and a refill from the index."""
    value = property_value(front_matter, "aliases", "alias") if isinstance(front_matter, dict) else None
    if isinstance(value, str):
        names = [_alias_text(a) for a in value.split(",")]
    elif isinstance(value, list):
        link = _unquoted_link(value)
        items = [link] if link is not None else map(_list_alias, value)
        names = [_alias_text(a) for a in items if a is not None]
    else:
        names = []
    return tuple(a for a in names if a)


def _unquoted_link(value: Any) -> str | None:
    """``[[Bar]]`` written unquoted, as YAML reads it (a list of one list of one text), as the
    link it was written as; None for anything else. Exactly that: a list of more items is no link
    ("[[a, b]]"), nor a mapping in it, nor a list deeper down ("[[[[Bar]]]]"). Only text counts
    (the parser reads ``[[010]]`` as the text written, ``_as_written``; a number is from an index
    an older reader wrote, whose notes are read again). Once parsed, the block
    form ``- - Bar`` and an anchor to a list of one name read the same, and are taken alike."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], list) and len(value[0]) == 1:
        name = value[0][0]
        return f"[[{name}]]" if isinstance(name, str) else None
    return None


def _list_alias(item: Any) -> str | None:
    """One item of an alias list as text: a name, or a link written unquoted (``- [[Bar]]``);
    another list is none. A yes/no is no name (none comes from the parser, which reads an unquoted
    ``yes`` as the text written; a true stored by an older reader named the note "True")."""
    if isinstance(item, list):
        return _unquoted_link(item)
    if not isinstance(item, str | int | float) or isinstance(item, bool):
        return None
    return str(item)


# A wiki-link written as an alias ("[[Bar]]", "[[Bar|bar]]"): the name it shows.
_ALIAS_LINK = re.compile(r"!?\[\[([^\]|#]*)[^\]|]*(?:\|([^\]]*))?\]\]")


def _alias_text(alias: str) -> str:
    """An alias as readable text on one line: a link as the name it shows, line breaks as spaces."""

    def shown(m: re.Match[str]) -> str:
        return (m.group(2) or m.group(1).rsplit("/", 1)[-1].removesuffix(".md")).strip()

    return " ".join(_ALIAS_LINK.sub(shown, alias).split())


def note_names(title: str, aliases: Sequence[str]) -> tuple[str, ...]:
    """The names a note is known by: its title, then its aliases, each once (case aside). An alias
    is another name of the same note (``[[Schuppen]]`` links to "Gartenhaus"): wherever the title
    counts (what the model reads of each chunk, the name rules of a search), these count alike."""
    seen = {title.strip().casefold()}
    out = [title]
    for alias in aliases:
        folded = alias.strip().casefold()
        if folded and folded not in seen:
            seen.add(folded)
            out.append(alias.strip())
    return tuple(out)


def description_of(front_matter_json: str) -> str:
    """A note's ``description`` (or ``summary``) property from the front matter the index keeps
    (JSON), on one line; '' when it gives none."""
    try:
        fm = json.loads(front_matter_json)
    except ValueError:
        return ""
    value = (
        (property_value(fm, "description") or property_value(fm, "summary")) if isinstance(fm, dict) else None
    )
    return " ".join(value.split()) if isinstance(value, str) else ""


def front_matter_block(text: str) -> tuple[str, int] | None:
    """The raw YAML of a note's front matter and the number of lines its block takes (markers
    included), or None. One rule for every reader: a ``---`` line at the very start and the next
    ``---`` line at the start of a line (an indented one is part of a quoted value, as the inbox
    writes "a\n---\nb")."""
    m = _BLOCK.match(text)
    if not m:
        return None
    return m.group(1) or "", text.count("\n", 0, m.end()) + (0 if text[m.end() - 1 : m.end()] == "\n" else 1)


def split_front_matter(text: str, *, as_written: bool = False) -> tuple[dict[str, Any], str]:
    """Front matter of a note as a dict (empty when absent or broken) and the body."""
    m = _BLOCK.match(text)
    if not m:
        return {}, text
    data, problem = parse_front_matter(m.group(1) or "", as_written=as_written)
    if problem is not None:
        return {}, text  # keep a broken block as body rather than lose it
    return data, text[m.end() :]


def front_matter_problem(text: str) -> str | None:
    """Why a note's front matter block cannot be read; None when it has none or it reads."""
    m = _BLOCK.match(text)
    return parse_front_matter(m.group(1) or "")[1] if m else None
