"""What the docs show can be typed and sent: every ``sidecar …`` command form of README.md and
docs/ is one the command line's parser takes, every op and parameter docs/protocol.md names is one
the daemon's handlers take (and the other way round), the example request is answered, and every
field of a real ``health`` answer is named in its section."""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import re
import shlex
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.clients.cli_parser import build_parser
from sidecar.config import load_config
from tests.conftest import FakeEmbedder, Harness, make_vault
from tests.in_process import InProcessServer

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "RELIABILITY.md", *sorted((ROOT / "docs").glob("*.md"))]
PROTOCOL = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")

# What a placeholder of a synopsis stands for, as a value its option takes.
_PLACEHOLDERS = {
    "N": "3",
    "X": "0.5",
    "S": "wiki",
    "DAY": "2026-09-01",
    "SECONDS": "5",
    "A": "claude",
    "NAME": "claude",
    "SLUG": "my-note",
    "ROOT": "vault",
    "FILE": "/tmp/x.yaml",
    "DIR": "/tmp/x",
    "PATH": "/tmp/x.sock",
    "FOLDER": "Projekte/",
    "TAG": "garten",
    "QUERY": "backup",
    "MESSAGE": "how do I restore",
    "REFERENCE": "vault/Backups",
    "…": "x",
}
# A placeholder's value where its option needs another than the placeholder's own.
_OPTION_VALUES = {"--tokens": "300"}
# Sentences the commands print that open with the program's name: output, not command lines.
_OUTPUT = re.compile(r"sidecar (is |\d+\.\d+)")


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """The command line's parser, built once for the file (a parse changes nothing in it)."""
    return build_parser()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    """One real server in this process for the file, over the small vault with the fake embedder:
    the op tests send requests it refuses or only reads, and the health test's one memory write
    changes none of their answers. Its configuration reads no environment (``env={}``): it is made
    before each test's own hermetic one."""
    root = tmp_path_factory.mktemp("docs-forms")
    vault = make_vault(root / "vault")
    h = Harness(
        load_config(flags={"home": str(root / "home"), "vault.path": str(vault)}, env={}), FakeEmbedder()
    )
    try:
        h.sweep()
        srv = InProcessServer(h)
    except BaseException:
        h.close()
        raise
    try:
        yield srv
    finally:
        try:
            srv.close()
        finally:
            h.close()


def _command_forms() -> list[tuple[str, str]]:
    """(document, form) for each command line the docs show: inline code and shell blocks' lines
        that run ``sidecar`` (by name or by a path ending in it), cut at a shell pipe (blanks around it:
    ``write|edit|delete`` and ``[--source wiki|vault]`` are alternatives, each one checked) or a
    redirection."""
    forms: list[tuple[str, str]] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        spans = [s.replace("\n", " ") for s in re.findall(r"(?<!`)`([^`]+)`(?!`)", text)]
        blocks = re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)
        lines = [line.split(" #", 1)[0] for block in blocks for line in block.splitlines()]
        for candidate in [*spans, *lines]:
            for part in re.split(r"&&|;|\$\(|\)", candidate):
                # The last ``sidecar``: ``claude mcp add sidecar -- /path/to/sidecar mcp …``
                m = re.search(r".*(?:^|[\s/])(sidecar (?=[\w-])(.*))", part.strip())
                if m is None or _OUTPUT.match(m.group(1)):
                    continue
                if not part.strip().startswith(("sidecar ", "/", "~", ".venv", "claude mcp")):
                    continue  # prose in code: "the folder sidecar kept …"
                forms.append((doc.name, re.split(r"\s\|\s|\s>\s", m.group(2))[0].strip()))
    return sorted(set(forms))


def _command_lines(form: str) -> list[list[str]]:
    """The command lines a synopsis stands for: each ``a|b`` alternative, every optional part
    given, placeholders filled in."""
    words = shlex.split(form.replace("[", " ").replace("]", " ").replace("\\|", "|"))
    choices = [w.split("|") if "|" in w else [w] for w in words]
    lines = itertools.product(*choices)
    return [[_value(before, w) for before, w in itertools.pairwise(["", *line])] for line in lines]


def _value(before: str, word: str) -> str:
    """A placeholder's value (the one its option ``before`` needs), else the word as written."""
    if word not in _PLACEHOLDERS:
        return word
    return _OPTION_VALUES.get(before, _PLACEHOLDERS[word])


def test_the_docs_show_command_forms() -> None:
    """The scan finds the forms it is meant to check (a changed markup would make it vacuous)."""
    forms = {form for _, form in _command_forms()}
    assert len(forms) > 40, sorted(forms)
    for expected in ("serve --vault ~/path/to/vault", "config example --write", "mcp --agent claude"):
        assert expected in forms, sorted(forms)


@pytest.mark.parametrize(("doc", "form"), _command_forms())
def test_every_command_form_the_docs_show_parses(doc: str, form: str) -> None:
    """Each ``sidecar …`` the README or docs/ shows is a command line the parser takes, with
    every option of its synopsis (`[--source wiki|vault]`: each alternative)."""
    for line in _command_lines(form):
        try:
            _parser().parse_args(line)
        except SystemExit as exc:  # argparse's way of ending: --version's 0, a refusal's 2
            if exc.code == 0 or _names_what_exists(line):
                continue
            pytest.fail(f"{doc}: `sidecar {form}` as `sidecar {shlex.join(line)}` is refused ({exc.code})")


def _names_what_exists(line: list[str]) -> bool:
    """A mention in prose rather than a command line (``sidecar why``, ``search --min-score``,
    ``memory write``: its arguments left out): its command, action and option exist."""
    if len(line) > 2:
        return False
    sub = next(a for a in _parser()._actions if a.dest == "command")
    command = sub.choices.get(line[0])  # type: ignore[union-attr]
    if command is None:
        return False
    if len(line) == 1:
        return True
    if line[1].startswith("-"):
        return line[1] in command._option_string_actions
    return any(line[1] in (a.choices or ()) for a in command._actions if not a.option_strings)


def test_the_mcp_snippets_args_parse() -> None:
    """The MCP clients' snippets in README (JSON and TOML) start a shim the parser takes."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    snippets = re.findall(r'"args": (\[[^\]]*\])|^args = (\[[^\]]*\])', readme, re.M)
    assert len(snippets) >= 2
    for json_args, toml_args in snippets:
        args = json.loads(json_args or toml_args)
        assert args[0] == "mcp", args
        _parser().parse_args(args)


def _sections() -> dict[str, str]:
    """Each op's section of docs/protocol.md, by op."""
    parts = re.split(r"^### `(\w+)`\n", PROTOCOL, flags=re.M)
    return {name: body.split("\n## ", 1)[0] for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def _documented_params(section: str) -> set[str] | None:
    """The parameters a section's table names (its first column; ``a`` / ``b`` and ``a``, ``b``
    name several); an empty set for "No parameters", None for one that defers to another op."""
    if section.lstrip().startswith("No parameters"):
        return set()
    table = re.search(r"^\| param \|.*?\n((?:\|.*\n)+)", section, re.M)
    if table is None:
        return None
    rows = table.group(1).splitlines()[1:]  # past the | --- | line
    return {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}


def _send(server: InProcessServer, request: dict[str, Any]) -> dict[str, Any]:
    """One request as the docs show it, the raw answer back."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(server.socket))
        s.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            assert chunk, "the daemon closed the connection unanswered"
            data += chunk
    answer: dict[str, Any] = json.loads(data)
    return answer


def test_every_op_the_daemon_serves_is_documented_and_every_documented_op_served(
    server: InProcessServer,
) -> None:
    """The ops the daemon names for an unknown op are exactly the ops docs/protocol.md has a
    section for."""
    answer = _send(server, {"v": 1, "op": "no-such-op"})
    assert answer["error"]["code"] == "bad_request"
    known = set(answer["error"]["message"].split("known ops: ", 1)[1].split(", "))
    assert known == set(_sections()), (known, set(_sections()))


@pytest.mark.parametrize("op", sorted(_sections()))
def test_each_ops_documented_parameters_are_the_ones_it_takes(server: InProcessServer, op: str) -> None:
    """An op's parameter table names exactly the parameters its handler accepts (the handler
    lists them when it refuses an unknown one)."""
    section = _sections()[op]
    documented = _documented_params(section)
    if documented is None:  # "Same parameters as `write`"
        same = re.match(r"\s*Same parameters as `(\w+)`", section)
        assert same is not None, f"{op}: no parameter table and no 'No parameters'"
        documented = _documented_params(_sections()[same.group(1)])
    answer = _send(server, {"v": 1, "op": op, "agent": "claude", "params": {"noSuchParam": 1}})
    message = answer["error"]["message"]
    assert answer["error"]["code"] == "bad_request", answer
    if "this op takes no parameters" in message:
        accepted = set()
    else:
        accepted = set(message.split("allowed: ", 1)[1].split(", "))
    assert documented == accepted, (op, documented, accepted)


def test_the_protocol_docs_example_requests_are_answered(server: InProcessServer) -> None:
    """Every request the protocol doc shows as JSON (a block, or inline code with an ``op``) is
    answered ``ok``, its ``id`` echoed."""
    blocks = re.findall(r"^```json\n(.*?)^```", PROTOCOL, re.M | re.S)
    inline = re.findall(r"`(\{[^`]*\"op\"[^`]*\})`", PROTOCOL)
    requests = [json.loads(b) for b in [*blocks, *inline] if '"op"' in b]
    assert requests
    for request in requests:
        answer = _send(server, request)
        assert answer.get("ok") is True, (request, answer)
        assert answer.get("id") == request.get("id")


def _field_paths(value: Any, below: str = "") -> set[str]:
    """The path of every object key in a JSON value (``index.files``), a list's objects under
    ``parent[]`` (``roots[].mode``); not below the objects keyed by data (``_KEYED_BY_DATA``)."""
    out: set[str] = set()
    if isinstance(value, dict) and below not in _KEYED_BY_DATA:
        for key, inner in value.items():
            path = f"{below}.{key}" if below else key
            out.add(path)
            out |= _field_paths(inner, path)
    elif isinstance(value, list):
        for item in value:
            out |= _field_paths(item, f"{below}[]")
    return out


# Objects whose keys are data (a source, an agent, a table, a reason), not field names.
_KEYED_BY_DATA = (
    "index.by_source",
    "index.by_agent",
    "vectors.embedded_by_table",
    "index.skipped",
    "index.excluded",
    "index.catching_up.leaving_by_source",
)


def _example_paths(text: str) -> tuple[set[str], set[str]]:
    """The path of every key in the JSON examples of ``text`` (``…`` and elisions allowed: its
    strings and brackets are scanned, it is not parsed), and the paths whose value is a list."""
    paths: set[str] = set()
    lists: set[str] = set()
    for block in re.findall(r"^```json\n(.*?)^```", text, re.M | re.S):
        stack: list[tuple[str, str]] = []  # (bracket, path) of each open object or list
        key = ""
        for m in re.finditer(r'"((?:[^"\\]|\\.)*)"(\s*:)?|[{}\[\]]', block):
            token = m.group(0)
            if token in "{[":
                top = stack[-1] if stack else None
                path = "" if top is None else f"{top[1]}[]" if top[0] == "[" else key
                if token == "[" and path:
                    lists.add(path)
                stack.append((token, path))
            elif token in "}]":
                if stack:
                    stack.pop()
            elif m.group(2) and stack and stack[-1][0] == "{":
                parent = stack[-1][1]
                key = f"{parent}.{m.group(1)}" if parent else m.group(1)
                paths.add(key)
    return paths, lists


# A field's whole path as the prose writes it: snake-case names (a camelCase one is a setting,
# ``index.optimizeMinutes``), a list's entries as ``[]``.
_PATH = re.compile(r"[a-z_0-9]+(\[\])?(\.[a-z_0-9]+(\[\])?)+")


def _prose_paths(text: str, lists: set[str] = frozenset()) -> set[str]:  # type: ignore[assignment]
    """The fields the prose of ``text`` names, each by its whole path, read from its backticks in
    order within each list item, by these rules only:
    - a whole path (`` `index.files` ``, `` `roots[].fs_type` ``);
    - a name joined to the path before it by `` / `` is its sibling (`` `vectors.serving` /
      `serving_model` ``);
    - the names of a ``{"a", "b"}`` (or ``{"a": …}``) right after a path, no other backticks
      between, are its fields (its entries' where ``lists`` says it is a list, as the examples
      show it);
    - ``name``: that is one of those names, then a ``{…}`` right after it, gives its fields
      (`` `backoff`: `{"gave_way"}` ``).
    No bare name is a field of the answer's top level (those are in the example), and no other
    backticked word is taken."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    paths: set[str] = set()
    for item in re.split(r"^- ", prose, flags=re.M):
        last: str | None = None  # the path of the token just before, if it was one
        fields: dict[str, str] = {}  # a name given in a {…} -> its whole path
        for m in re.finditer(r"`([^`]+)`(\s*:)?", item):
            code, between = m.group(1), item[: m.start()]
            joined = last is not None and re.search(r"\s/\s*$", between) is not None
            if _PATH.fullmatch(code):
                last = code
                paths.add(code)
            elif code.startswith("{") and last is not None:
                keyed = re.findall(r'"(\w+)"\s*:', code)
                owner = f"{last}[]" if last in lists else last
                for name in keyed or re.findall(r'"(\w+)"', code):
                    fields[name] = f"{owner}.{name}"
                    paths.add(fields[name])
                last = None
            elif re.fullmatch(r"\w+", code) and joined and last is not None:
                last = f"{last.rsplit('.', 1)[0]}.{code}" if "." in last else None
                if last is not None:
                    paths.add(last)
            elif re.fullmatch(r"\w+", code) and m.group(2) and code in fields:
                last = fields[code]
            else:
                last = None
    return paths


def _documented(section: str) -> set[str]:
    """The field paths a section documents: its examples' keys, and the paths its prose names
    (``_prose_paths``) below a top-level field of the examples (not ``manifest.sqlite``)."""
    example, lists = _example_paths(section)
    top = {p for p in example if "." not in p and "[" not in p}
    return example | {p for p in _prose_paths(section, lists) if re.split(r"[.\[]", p)[0] in top}


def _health_states(server: InProcessServer, serve_in_process: Any, tmp_path: Path) -> list[dict[str, Any]]:
    """Health answers of a healthy vault asked by an agent, and, on one more server with the model
    off by configuration, of states whose fields only they have, one after the other: an agent's
    inbox refused (an active problem), a large vault's keyword rewrite given up to a busy vault
    (its outcome and back-off), the keyword index rebuilt after damage (the copy moved aside, a
    recent problem), a share down (the vault unmounted: its deletions held)."""
    import shutil

    from sidecar.index import repair

    server.call("write", {"slug": "a-note", "content": "remember the backups"}, agent="claude")
    states = [_send(server, {"v": 1, "op": "health", "agent": "claude"})["result"]]
    other = serve_in_process(
        make_vault(tmp_path / "other"), home=str(tmp_path / "home"), model=None, **{"embedder.enabled": False}
    )
    try:
        vault, stores = other.cfg.vault.path, other.harness.stores
        for i in range(5):  # enough notes for the guard against a mass loss
            (vault / f"Notes/n{i}.md").parent.mkdir(exist_ok=True)
            (vault / f"Notes/n{i}.md").write_text(f"# Note {i}\n\nThe keeper of lighthouse {i}.\n")
        inbox = other.cfg.agents_dir / "bob" / "memory"
        inbox.parent.mkdir(parents=True)
        inbox.symlink_to(tmp_path)  # a symbolic link: refused, said as a problem
        other.harness.sweep()
        states.append(other.call("health"))
        repair._given_up(stores, "behind")
        states.append(other.call("health"))
        # The keyword index repaired: moved aside (kept for a month, ``moved_aside``), rebuilt.
        other.harness.repair.repair_bm25("a test's damage")
        states.append(other.call("health"))
        aside = tmp_path / "aside"
        aside.mkdir()
        for p in list(vault.iterdir()):  # the share unmounted: its mount point stays, empty
            shutil.move(str(p), str(aside / p.name))
        other.harness.sweep()
        assert other.harness.supervisor.roots["vault"].hold_kind == "empty"
        states.append(other.call("health"))
    finally:
        other.close()
        other.harness.close()
    return states


def test_every_health_field_is_named_in_its_section(
    server: InProcessServer, serve_in_process: Any, tmp_path: Path
) -> None:
    """Each field of real ``health`` answers, in a healthy vault and in states whose fields only
    they have, is named in docs/protocol.md's ``health`` section by its whole path (in an example,
    or written out in the prose by ``_prose_paths``' few rules), so a field added to the answer is documented
    with it. Matched by its name alone, a new ``vectors.failures`` passed as ``roots[].failures``."""
    documented = _documented(_sections()["health"])
    fields: set[str] = set()
    for health in _health_states(server, serve_in_process, tmp_path):
        fields |= _field_paths(health)
    missing = sorted(fields - documented)
    assert missing == [], missing


def test_the_health_field_check_takes_a_name_for_its_own_parent_only() -> None:
    """The check of the health section names a field by its path: a name documented under one
    parent does not document it under another, and a word of the prose documents nothing by
    itself (taken as a field of every path an item names, ``count`` and ``vectors.error``
    passed undocumented)."""
    text = (
        '```json\n{"roots": [{"name": "vault", "failures": 0}], "index": {"files": 3, "x": "{a"},\n'
        ' "problems": {"active": []}, "vectors": {}}\n```\n\n'
        "- `roots[].failures`: retries so far (`count`, `error`).\n"
        '- `index.keyword_compaction_last`: `{"outcome", "backoff"}`; `backoff`: `{"gave_way"}`.\n'
        '- `problems.active`: an entry is `{"area", "since"}`.\n'
    )
    documented = _documented(text)
    assert {"roots[].name", "roots[].failures", "index.files", "index.x"} <= documented
    assert "index.keyword_compaction_last.backoff.gave_way" in documented
    assert "problems.active[].area" in documented and "problems.active.area" not in documented
    assert "vectors.failures" not in documented and "index.failures" not in documented
    assert not {"count", "error", "roots[].count", "roots[].failures.count"} & documented
    sibling = "- `roots[].files_seen` / `files_skipped`: the notes the last sweep found.\n"
    assert "roots[].files_skipped" in _prose_paths(sibling)
    assert "index.files_skipped" not in _prose_paths(sibling)
    real = _documented(_sections()["health"])
    assert "index.keyword_compaction_last.backoff.runs_to_skip" in real
    assert not {"count", "error", "vectors.error", "vectors.reason", "index.count", "embedder.home"} & real
    assert not {"index.keyword_compaction_last.outcome.reason", "index.bytes"} & real


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_configuration_example_in_the_docs_loads(tmp_path: Path, doc: Path) -> None:
    """Each YAML block of the README and docs/ is a configuration file `config check` takes:
    its keys exist and its values are valid."""
    from sidecar.config import load_config

    blocks = re.findall(r"^```yaml\n(.*?)^```", doc.read_text(encoding="utf-8"), re.M | re.S)
    for n, block in enumerate(blocks):
        path = tmp_path / f"example-{n}.yaml"
        path.write_text(block, encoding="utf-8")
        load_config(config_file=str(path), env={})  # raises ConfigError naming the key


def test_the_version_line_the_readme_shows_is_the_one_printed() -> None:
    """README's `sidecar --version` example has the shape the command prints (the build, the
    package it was installed as, the model), with the placeholders' values as the only change."""
    from sidecar.clients.cli_parser import version_text

    readme = (ROOT / "README.md").read_text(encoding="utf-8").replace("\n", " ")
    shown = re.search(r"`(sidecar \d+\.\d+\.\d+ \(build [^`]*)`", readme)
    assert shown is not None
    shape = r"sidecar \d+\.\d+\.\d+ \(build [0-9a-f]{12}, distribution sidecar-recall\), "
    shape += r"model \S+ \(default\)"
    assert re.fullmatch(shape, shown.group(1)), shown.group(1)
    assert re.fullmatch(shape, version_text()), version_text()


def test_every_setting_the_readme_names_exists() -> None:
    """Each ``section.key`` README.md names in code is a setting `config check` knows, or one it
    still reads under its new name or says is gone (health's fields, `index.immutable`, aside)."""
    from sidecar.config.loader import RENAMED, RETIRED, settings

    known = {s.dotted for s in settings()} | set(RENAMED) | set(RETIRED)
    sections = sorted({key.split(".", 1)[0] for key in known if "." in key})
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(rf"`((?:{'|'.join(sections)})\.[A-Za-z]+(?:\.[A-Za-z]+)*)`", readme))
    assert len(named) > 40, named
    health = {"index.immutable"}  # the README's troubleshooting table names this field of health
    sections_named = {k for k in named if any(s.startswith(f"{k}.") for s in known)}  # `search.boosts`
    unknown = sorted(named - health - sections_named - known)
    assert unknown == [], unknown
