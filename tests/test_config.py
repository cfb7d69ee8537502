"""Configuration: precedence, validation with file/key/value, defaults, the example file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sidecar.config import load_config, render_example
from sidecar.contracts.errors import ConfigError, ExitCode

REPO = Path(__file__).resolve().parent.parent


def _yaml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "config.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_defaults_match_design(tmp_path: Path) -> None:
    """Defaults: fusion 0.6/0.4, boosts wiki 1.1 memory 1.05 vault 1.0, rescan 10 min, home ~/.sidecar."""
    cfg = load_config(env={"HOME": str(tmp_path)})
    assert cfg.search.vector_weight == 0.6
    assert (cfg.search.boosts.wiki, cfg.search.boosts.memory, cfg.search.boosts.vault) == (1.1, 1.05, 1.0)
    assert cfg.index.rescan_minutes == 10
    assert cfg.home == (Path.home() / ".sidecar").resolve()
    assert cfg.vault.wiki_subfolder == "wiki"


def test_precedence_flag_over_env_over_file(tmp_path: Path) -> None:
    """A flag beats SIDECAR_* which beats the YAML file which beats the default."""
    f = _yaml(tmp_path, "search:\n  limit: 5\n  vectorWeight: 0.6\nvault:\n  wikiSubfolder: curated\n")
    env = {"SIDECAR_SEARCH_LIMIT": "7"}
    cfg = load_config(config_file=str(f), env=env, flags={"vault.wikiSubfolder": "kb"})
    assert cfg.search.limit == 7
    assert cfg.search.vector_weight == 0.6
    assert cfg.vault.wiki_subfolder == "kb"
    assert cfg.origins["search.limit"] == "environment SIDECAR_SEARCH_LIMIT"
    assert cfg.origins["search.vectorWeight"].startswith("file ")
    assert cfg.origins["vault.wikiSubfolder"] == "flag"
    assert cfg.origins["chunking.maxTokens"] == "default"


def test_config_file_from_environment(tmp_path: Path) -> None:
    """SIDECAR_CONFIG names the file when no --config is given."""
    f = _yaml(tmp_path, "search:\n  limit: 3\n")
    assert load_config(env={"SIDECAR_CONFIG": str(f)}).search.limit == 3


def test_default_config_location_is_read(tmp_path: Path) -> None:
    """~/.config/sidecar/config.yaml (or $XDG_CONFIG_HOME/sidecar) is read when present."""
    (tmp_path / "xdg" / "sidecar").mkdir(parents=True)
    (tmp_path / "xdg" / "sidecar" / "config.yaml").write_text("search:\n  limit: 4\n")
    assert load_config(env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")}).search.limit == 4
    # A relative XDG_CONFIG_HOME is ignored (XDG Base Directory specification), as systemd
    # does for the unit's folder: the file was read relative to the working folder.
    cfg = load_config(env={"XDG_CONFIG_HOME": "xdg"}, cwd=tmp_path)
    assert cfg.default_file == Path("~/.config/sidecar/config.yaml").expanduser()


def test_a_relative_xdg_config_home_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A relative XDG_CONFIG_HOME is ignored now; the file it named from the working folder was
    read before, and with no word the daemon started without its vault. A warning names that
    file (the start logs it, `config check` lists it, every other command says it on stderr);
    none when a file is named."""
    (tmp_path / "xdg" / "sidecar").mkdir(parents=True)
    (tmp_path / "xdg" / "sidecar" / "config.yaml").write_text("search:\n  limit: 4\n")
    cfg = load_config(env={"XDG_CONFIG_HOME": "xdg"}, cwd=tmp_path)
    said = [w for w in cfg.warnings if "XDG_CONFIG_HOME" in w]
    assert len(said) == 1 and f"{tmp_path / 'xdg' / 'sidecar' / 'config.yaml'} is no longer read" in said[0]
    named = _yaml(tmp_path, "search:\n  limit: 3\n")
    for env in ({"SIDECAR_CONFIG": str(named)}, {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}):
        assert not any(
            "XDG_CONFIG_HOME" in w for w in load_config(env={"XDG_CONFIG_HOME": "xdg", **env}).warnings
        )
    from sidecar.clients.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", "xdg")
    for name in [n for n in os.environ if n.startswith("SIDECAR_")]:
        monkeypatch.delenv(name)
    main(["config", "check", "--home", str(tmp_path / "h")])
    out = capsys.readouterr().out
    assert "XDG_CONFIG_HOME='xdg' is not an absolute path and is ignored" in out, out
    # `config path` too (it was silent), on stderr: its stdout is the path alone.
    main(["config", "path"])
    both = capsys.readouterr()
    assert "XDG_CONFIG_HOME='xdg' is not an absolute path" in both.err
    assert both.out == f"{tmp_path / 'home' / '.config' / 'sidecar' / 'config.yaml'}\n"
    # Nothing there to be missed: nothing said (every command, an agent's hooks too, said it).
    monkeypatch.setenv("XDG_CONFIG_HOME", "elsewhere")
    assert not any(
        "XDG_CONFIG_HOME" in w
        for w in load_config(env={"XDG_CONFIG_HOME": "elsewhere"}, cwd=tmp_path).warnings
    )
    main(["config", "path"])
    assert "XDG_CONFIG_HOME" not in capsys.readouterr().err


def test_unknown_key_names_file_key_and_value(tmp_path: Path) -> None:
    """A typo in a key is an error naming the file, the key and the value."""
    f = _yaml(tmp_path, "search:\n  vectorWieght: 0.5\n")
    with pytest.raises(ConfigError) as exc:
        load_config(config_file=str(f), env={})
    msg = str(exc.value)
    assert str(f) in msg and "search.vectorWieght" in msg and "0.5" in msg


@pytest.mark.parametrize(
    ("yaml_text", "needle"),
    [
        ("search:\n  vectorWeight: 1.5\n", "at most 1.0"),
        ("search:\n  limit: many\n", "integer"),
        ("search:\n  limit: 2.5\n", "integer"),
        ("embedder:\n  pooling: max\n", "one of"),
        ("search:\n  stemFirst: [en, fr]\n", "each item must be one of en, de"),
        ("embedder:\n  enabled: maybe\n", "true or false"),
        ("chunking:\n  maxTokens: 400\n", "maxLength"),
        ("vault:\n  wikiSubfolder: ../outside\n", "inside the vault"),
        ("vault:\n  wikiSubfolder: /elsewhere/wiki\n", "inside the vault"),
        ("search:\n  minScore: .nan\n", "finite"),
        ("search:\n  boosts:\n    vault: .NaN\n", "finite"),
        ("watch:\n  probeTimeoutSeconds: .inf\n", "finite"),
        ("- a list\n", "mapping"),
        ("search: [\n", "invalid YAML"),
    ],
)
def test_bad_values_are_errors(tmp_path: Path, yaml_text: str, needle: str) -> None:
    """Wrong types, ranges, choices and broken YAML are clear errors."""
    f = _yaml(tmp_path, yaml_text)
    with pytest.raises(ConfigError, match=needle):
        load_config(config_file=str(f), env={})


def test_bad_environment_value_and_unknown_variable() -> None:
    """SIDECAR_* values are validated; an unknown variable is a warning naming the likely key, not
    fatal; the project's own SIDECAR_CI_VENV is not even a warning."""
    with pytest.raises(ConfigError, match="SIDECAR_SEARCH_LIMIT"):
        load_config(env={"SIDECAR_SEARCH_LIMIT": "-3"})
    cfg = load_config(env={"SIDECAR_SEARCH_LIMITT": "3"})
    assert len(cfg.warnings) == 1 and "SIDECAR_SEARCH_LIMITT" in cfg.warnings[0]
    assert "did you mean SIDECAR_SEARCH_LIMIT?" in cfg.warnings[0]
    assert load_config(env={"SIDECAR_CI_VENV": "/tmp/v"}).warnings == ()


def test_a_renamed_key_still_loads_with_a_warning(tmp_path: Path) -> None:
    """A file or environment written for an older release keeps working: a renamed key's value
    is used under its new name and a warning names both; giving both names is an error."""
    old = _yaml(tmp_path, "search:\n  rareTermChunks: 3\n")
    cfg = load_config(config_file=str(old), env={})
    assert cfg.search.rare_term_notes == 3
    assert len(cfg.warnings) == 1 and "search.rareTermChunks is now search.rareTermNotes" in cfg.warnings[0]
    assert cfg.origins["search.rareTermNotes"].startswith("file ")
    cfg = load_config(env={"SIDECAR_SEARCH_RARE_TERM_CHUNKS": "2"})
    assert cfg.search.rare_term_notes == 2 and "SIDECAR_SEARCH_RARE_TERM_NOTES" in cfg.warnings[0]
    both = _yaml(tmp_path, "search:\n  rareTermChunks: 3\n  rareTermNotes: 4\n")
    with pytest.raises(ConfigError, match=r"are one setting: keep search\.rareTermNotes"):
        load_config(config_file=str(both), env={})
    with pytest.raises(ConfigError, match="keep SIDECAR_SEARCH_RARE_TERM_NOTES"):
        load_config(env={"SIDECAR_SEARCH_RARE_TERM_CHUNKS": "2", "SIDECAR_SEARCH_RARE_TERM_NOTES": "1"})


def test_a_key_given_twice_is_a_warning(tmp_path: Path) -> None:
    """YAML keeps the last of two equal keys without a word: a user who edited the first one saw
    nothing happen. Loaded as before (the last one), with a warning naming the key and its line."""
    twice = _yaml(tmp_path, "search:\n  limit: 3\n  limit: 2\nindex:\n  exclude: [a/]\n")
    cfg = load_config(config_file=str(twice), env={})
    assert cfg.search.limit == 2
    assert len(cfg.warnings) == 1 and "'limit' given twice in one section (lines 2 and 3)" in cfg.warnings[0]
    once = _yaml(tmp_path, "search:\n  limit: 3\nrecall:\n  limit: 2\n")  # one per section
    assert not load_config(config_file=str(once), env={}).warnings


def test_a_section_given_twice_is_read_as_one_key_by_key(tmp_path: Path) -> None:
    """`vault:` twice: YAML keeps the second section whole, so vault.path of the first was gone.
    An error instead stopped a config that ran (the example with README's `vault:` snippet
    appended): the copies are merged key by key, the later key used, a warning naming the lines."""
    twice = _yaml(tmp_path, "vault:\n  path: /srv/notes\nsearch:\n  limit: 3\nvault:\n  wikiSubfolder: w\n")
    cfg = load_config(config_file=str(twice), env={})
    assert (cfg.vault.path, cfg.vault.wiki_subfolder, cfg.search.limit) == (Path("/srv/notes"), "w", 3)
    assert (
        len(cfg.warnings) == 1
        and "'vault' given twice (lines 1 and 5): read as one section" in cfg.warnings[0]
    )
    appended = tmp_path / "appended.yaml"
    appended.write_text(render_example() + "vault:\n  path: /srv/notes\n")
    cfg = load_config(config_file=str(appended), env={})
    assert (cfg.vault.path, cfg.vault.wiki_subfolder) == (Path("/srv/notes"), "wiki")
    said = [w for w in cfg.warnings if "'path'" in w]
    assert len(said) == 1 and "'vault' given twice" in said[0] and "the last is used" in said[0], said
    empty_first = _yaml(tmp_path, "vault:\nsearch:\n  limit: 3\nvault:\n  path: /srv/notes\nvault: ~\n")
    assert load_config(config_file=str(empty_first), env={}).vault.path == Path("/srv/notes")


def test_a_section_and_a_key_in_both_copies_are_one_warning(tmp_path: Path) -> None:
    """`vault:` twice, `path` in both copies: two warnings (the section, then the key as if given
    twice in one section) said one mistake twice; one line names both, the last value used."""
    twice = _yaml(
        tmp_path, "vault:\n  path: /srv/a\nsearch:\n  limit: 3\nvault:\n  path: /srv/b\n  wikiSubfolder: w\n"
    )
    cfg = load_config(config_file=str(twice), env={})
    assert (cfg.vault.path, cfg.vault.wiki_subfolder) == (Path("/srv/b"), "w")
    assert cfg.warnings == (
        f"{twice}: 'vault' given twice (lines 1 and 5): read as one section, where 'path' (lines 2 "
        "and 6) given more than once: the last is used; write its keys under one",
    ), cfg.warnings
    thrice = _yaml(tmp_path, "vault:\n  path: /a\nvault:\n  path: /b\nvault:\n  path: /c\n")
    cfg = load_config(config_file=str(thrice), env={})
    assert cfg.vault.path == Path("/c") and len(cfg.warnings) == 1, cfg.warnings
    assert "'vault' given 3 times (lines 1, 3 and 5)" in cfg.warnings[0], cfg.warnings
    assert "where 'path' (lines 2, 4 and 6) given more than once" in cfg.warnings[0], cfg.warnings


def test_keys_the_example_wrote_at_their_default_read_as_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`config example --write` writes every key: `config check` then said every one came from
    the file, and which ones a person set could not be told. A key the file gives at its default
    reads as the default, also written in the file; one changed, or a model's own, as before."""
    from sidecar.clients.cli import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in [n for n in os.environ if n.startswith("SIDECAR_")]:
        monkeypatch.delenv(name)
    written = tmp_path / "conf" / "config.yaml"
    assert main(["config", "example", "--write", str(written)]) == 0
    written.write_text(written.read_text().replace("batchFiles: 128", "batchFiles: 64"))
    capsys.readouterr()
    assert main(["config", "check", "--config", str(written)]) == 0
    out = capsys.readouterr().out
    assert f"index.rescanMinutes = 10.0  (default; also written in {written})" in out, out
    assert f"home = {tmp_path / 'home' / '.sidecar'}  (default; also written in {written})" in out, out
    assert f"index.batchFiles = 64  (file {written})" in out, out
    assert "recall.minSimilarity = 0.35  (model multilingual-e5-small)" in out, out
    assert main(["config", "check", "--json", "--config", str(written)]) == 0
    values = json.loads(capsys.readouterr().out)["values"]
    assert values["index.rescanMinutes"] == {"value": 10.0, "from": "default", "inFile": True}
    assert values["index.batchFiles"] == {"value": 64, "from": f"file {written}"}
    cfg = load_config(config_file=str(written), env={}, flags={"index.rescanMinutes": "10"})
    assert "index.rescanMinutes" not in cfg.file_defaults  # a flag's value is the flag's
    assert cfg.origins["index.rescanMinutes"] == "flag"


def test_an_error_names_the_warnings_beside_it(tmp_path: Path) -> None:
    """An unknown key beside renamed ones showed only the error; the renames came to light once
    it was mended, a round of editing later. The error carries them."""
    bad = _yaml(tmp_path, "search:\n  rareTermChunks: 3\n  limitt: 4\n")
    with pytest.raises(ConfigError) as err:
        load_config(config_file=str(bad), env={})
    text = str(err.value)
    assert "limitt" in text and "warning: search.rareTermChunks is now search.rareTermNotes" in text.replace(
        f"{bad}: ", ""
    )


def test_a_file_of_an_older_release_still_loads(tmp_path: Path) -> None:
    """A setting that is gone is a warning saying why, not an error (an unknown key stopped a
    service with exit 3, which it does not restart); one that moved is renamed."""
    old = _yaml(
        tmp_path,
        "search:\n  vectorMinSpread: 0.1\nembedder:\n  optimization: all\nindex:\n  debounceMs: 500\n",
    )
    cfg = load_config(config_file=str(old), env={})
    assert cfg.watch.debounce_ms == 500
    text = " ".join(cfg.warnings)
    assert "search.vectorMinSpread is no longer a setting (fusion calibrates" in text and "delete it" in text
    assert (
        "embedder.optimization is no longer a setting" in text
        and "index.debounceMs is now watch.debounceMs" in text
    )


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    """Three problems in a file and the environment: one error listing all, each with file, key,
    value and what was expected."""
    f = _yaml(tmp_path, "search:\n  limit: many\n  vectorWieght: 0.5\n")
    with pytest.raises(ConfigError) as exc:
        load_config(config_file=str(f), env={"SIDECAR_SEARCH_VECTOR_WEIGHT": "2"})
    msg = str(exc.value)
    assert msg.startswith("3 configuration problems:")
    assert f"{f}: search.limit = 'many': expected an integer" in msg
    assert "unknown key 'search.vectorWieght' (value 0.5); did you mean search.vectorWeight?" in msg
    assert "environment SIDECAR_SEARCH_VECTOR_WEIGHT: search.vectorWeight = '2': must be at most 1.0" in msg
    assert "sidecar config example" in msg and "config/sidecar.example.yaml" not in msg


def test_section_written_as_a_value_gets_a_hint(tmp_path: Path) -> None:
    """`vault: /path` says how to write it (vault.path), not 'unknown key'."""
    f = _yaml(tmp_path, "vault: /data/notes\n")
    with pytest.raises(ConfigError) as exc:
        load_config(config_file=str(f), env={})
    msg = str(exc.value)
    assert "vault is a section" in msg and "path: /data/notes" in msg and "vault.path" in msg
    assert "unknown key" not in msg


def test_missing_named_config_file(tmp_path: Path) -> None:
    """A config file named explicitly must exist."""
    with pytest.raises(ConfigError, match="not found"):
        load_config(config_file=str(tmp_path / "nope.yaml"), env={})


def test_home_inside_the_vault_is_refused(tmp_path: Path) -> None:
    """The index and the agents' memory are never written among the vault's notes (nor found as
    notes); a hidden folder of the vault, never scanned, may hold them."""
    vault = tmp_path / "vault"
    for home in (vault / "sidecarhome", vault / "Notes" / "sidecar", vault):
        with pytest.raises(ConfigError, match="inside the vault"):
            load_config(flags={"home": str(home), "vault.path": str(vault)}, env={})
    load_config(flags={"home": str(tmp_path / "home"), "vault.path": str(vault)}, env={})
    load_config(flags={"home": str(tmp_path), "vault.path": str(vault)}, env={})  # vault in the home
    # A hidden folder is never scanned: a vault of ~ with the default home ~/.sidecar runs; but
    # the index is written into the vault's folder (a synced vault carries it), which README says
    # never happens: said plainly (config check, serve, doctor), not by the query commands.
    (vault / "Note.md").parent.mkdir(parents=True)
    cfg = load_config(flags={"home": str(vault / ".sidecar"), "vault.path": str(vault)}, env={})
    said = [w for w in cfg.warnings if "lies in a hidden folder inside the vault" in w]
    assert len(said) == 1 and "written into the vault's folder" in said[0], cfg.warnings
    assert said[0] in cfg.setup_notes  # said by config check, serve and doctor only
    from sidecar.clients.doctor_storage import check_home

    home = check_home(cfg)
    assert home.ok and home.warning and "inside the vault" in home.verdict, home
    assert not [w for w in load_config(flags={"vault.path": str(vault)}, env={}).warnings if "hidden" in w]


def test_a_home_in_a_hidden_folder_of_the_vault_is_no_nag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A vault of ~ with the default home ~/.sidecar (README calls it normal) was warned of on
    every status, index and reload, and twice by doctor: said by config check and serve only
    (doctor's home check says it)."""
    from sidecar.clients.cli import main

    vault = tmp_path / "vault"
    vault.mkdir()
    for name in [n for n in os.environ if n.startswith("SIDECAR_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SIDECAR_VAULT_PATH", str(vault))
    monkeypatch.setenv("SIDECAR_HOME", str(vault / ".sidecar"))
    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))  # no configuration file there
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert main(["status"]) == ExitCode.NOT_RUNNING
    assert "hidden folder" not in capsys.readouterr().err
    assert main(["config", "check"]) == 0
    assert "warning: the home" in capsys.readouterr().out


def test_relative_paths_in_file_resolve_next_to_it(tmp_path: Path) -> None:
    """vault.path in the YAML file is relative to the file, not to the working directory; the
    example file and README say so (it was undocumented)."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    assert "A relative path in the file (`vault.path: notes`) counts from the\nfile's own folder" in readme
    assert "# counts from this file's folder; one in a flag or variable from the working folder." in (
        render_example()
    )
    f = _yaml(tmp_path, "vault:\n  path: notes\n")
    assert load_config(config_file=str(f), env={}).vault.path == (tmp_path / "notes").resolve()


def test_socket_location(tmp_path: Path) -> None:
    """Socket in $XDG_RUNTIME_DIR when set, else in <home>/run, else a short private /tmp path."""
    home = tmp_path / "h"
    cfg = load_config(env={"SIDECAR_HOME": str(home)})
    assert cfg.socket_path == home.resolve() / "run" / "sidecar.sock"
    cfg = load_config(env={"SIDECAR_HOME": str(home), "XDG_RUNTIME_DIR": str(tmp_path / "rt")})
    assert cfg.socket_path.parent.parent == tmp_path / "rt"
    deep = tmp_path / ("x" * 120)
    cfg = load_config(env={"SIDECAR_HOME": str(deep)})
    assert len(str(cfg.socket_path)) < 100 and str(cfg.socket_path).startswith("/tmp/sidecar-")


def test_example_file_is_current() -> None:
    """config/sidecar.example.yaml documents every key with its default (`sidecar config example`)."""
    assert (REPO / "config" / "sidecar.example.yaml").read_text(encoding="utf-8") == render_example()


def test_example_file_loads_cleanly(tmp_path: Path) -> None:
    """The example file is itself a valid configuration."""
    cfg = load_config(config_file=str(REPO / "config" / "sidecar.example.yaml"), env={})
    assert cfg.search.limit == 10


def test_a_list_of_names_from_a_fixed_set(tmp_path: Path) -> None:
    """search.stemFirst: names in any case, a repeat once; an empty environment value or an empty
    YAML list turns it off."""
    env = {"SIDECAR_HOME": str(tmp_path)}
    cfg = load_config(env={**env, "SIDECAR_SEARCH_STEM_FIRST": "EN, de,en"})
    assert cfg.search.stem_first == ("en", "de")
    assert load_config(env={**env, "SIDECAR_SEARCH_STEM_FIRST": ""}).search.stem_first == ()
    f = _yaml(tmp_path, "search:\n  stemFirst: []\n")
    assert load_config(config_file=str(f), env=env).search.stem_first == ()


def test_a_full_wiki_path_inside_the_vault_is_taken_as_its_folder(tmp_path: Path) -> None:
    """wikiSubfolder written as a full path inside the vault names that folder (it was read as
    a relative path below the vault: a folder nobody meant, watched and empty)."""
    vault = tmp_path / "v"
    (vault / "wiki").mkdir(parents=True)
    f = _yaml(tmp_path, f"vault:\n  path: {vault}\n  wikiSubfolder: {vault / 'wiki'}\n")
    assert load_config(config_file=str(f), env={}).vault.wiki_subfolder == "wiki"


def test_a_list_in_the_environment_is_comma_separated_and_a_yaml_list_is_refused() -> None:
    """README: a list-valued variable is one string, items separated by commas. `[a/, b/]` (a YAML
    list) was split into the patterns '[a/' and 'b/]', excluding nothing, without a word; it is an
    error saying how to write it, and a trailing comma keeps a real bracket expression."""
    env = {"SIDECAR_INDEX_EXCLUDE": "Templates/, Archive/"}
    assert load_config(env=env).index.exclude == ("Templates/", "Archive/")
    with pytest.raises(ConfigError) as err:
        load_config(env={"SIDECAR_INDEX_EXCLUDE": "[Templates/, 'Archive/']"})
    message = str(err.value)
    assert "environment SIDECAR_INDEX_EXCLUDE" in message and "index.exclude" in message
    assert "separated by commas: 'Templates/,Archive/'" in message
    assert load_config(env={"SIDECAR_INDEX_EXCLUDE": "[Tt]emplates/,"}).index.exclude == ("[Tt]emplates/",)
    assert load_config(env={"SIDECAR_INDEX_EXCLUDE": "[ab],"}).index.exclude == ("[ab]",)


def test_a_cross_key_error_names_where_each_value_came_from(tmp_path: Path) -> None:
    """chunking.maxTokens against embedder.maxLength: the default 200 and an environment 128 are
    named as such, not blamed on the configuration file (which sets neither)."""
    cfg_file = tmp_path / "sidecar.yaml"
    cfg_file.write_text("search:\n  limit: 5\n")
    env = {"SIDECAR_EMBEDDER_MAX_LENGTH": "128"}
    with pytest.raises(ConfigError) as err:
        load_config(config_file=str(cfg_file), env=env)
    message = str(err.value)
    assert str(cfg_file) not in message, message
    assert "chunking.maxTokens = 200 (default)" in message
    assert "embedder.maxLength = 128 (environment SIDECAR_EMBEDDER_MAX_LENGTH)" in message
    cfg_file.write_text("chunking:\n  maxTokens: 127\n")
    with pytest.raises(ConfigError) as err:
        load_config(config_file=str(cfg_file), env=env)
    assert f"chunking.maxTokens = 127 (file {cfg_file.resolve()})" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(env={"SIDECAR_VAULT_WIKI_SUBFOLDER": "../up", "SIDECAR_VAULT_PATH": str(tmp_path)})
    wiki = "environment SIDECAR_VAULT_WIKI_SUBFOLDER: vault.wikiSubfolder = '../up'"
    assert str(err.value).startswith(wiki)


def test_an_exclude_pattern_the_index_cannot_read_is_a_config_error(tmp_path: Path) -> None:
    """A lone backslash in index.exclude passed `config check`, then failed the start with a
    traceback (exit 1, restarted in a loop by the service manager) and a reload half-way."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text('index:\n  exclude: ["de/", "\\\\"]\n')
    with pytest.raises(ConfigError, match=r"index.exclude pattern '\\\\' is not a gitignore pattern"):
        load_config(config_file=str(cfg), env={})
    cfg.write_text('index:\n  exclude: ["de/", "[unclosed", "# a comment"]\n')
    assert load_config(config_file=str(cfg), env={}).index.exclude[0] == "de/"


def test_config_check_says_when_the_model_folder_holds_no_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """embedder.path set to a folder without model.onnx: doctor failed it, `config check` said
    'configuration OK' (the daemon then searches by keywords only)."""
    from sidecar.clients.cli import command_for
    from sidecar.clients.cli_parser import build_parser

    folder = tmp_path / "model"
    folder.mkdir()

    def check(*flags: str) -> str:
        cfg = load_config(env={"SIDECAR_EMBEDDER_PATH": str(folder)})
        assert command_for("config")(build_parser().parse_args(["config", "check", *flags]), cfg) == 0
        return capsys.readouterr().out

    out = check()
    assert out.startswith("configuration with 1 warning(s)"), out
    assert f"warning: embedder.path {folder} holds no model.onnx and tokenizer.json" in out
    assert "holds no model.onnx" in json.loads(check("--json"))["warnings"][0]
    # One of the two there: the warning names the one missing (it named both)
    (folder / "model.onnx").write_bytes(b"onnx")
    assert f"warning: embedder.path {folder} holds model.onnx but no tokenizer.json" in check()
    (folder / "model.onnx").unlink()
    (folder / "tokenizer.json").write_text("{}")
    assert f"warning: embedder.path {folder} holds tokenizer.json but no model.onnx" in check()
    (folder / "tokenizer.json").unlink()
    (folder / "model.onnx").write_bytes(b"onnx")
    (folder / "tokenizer.json").write_text("{}")
    assert check().startswith("configuration OK")
    (folder / "model.onnx").unlink()
    folder.rename(tmp_path / "gone")
    assert f"embedder.path {folder} does not exist" in check()


def test_one_xdg_rule_serves_the_configuration_file_the_state_folder_and_the_unit(tmp_path: Path) -> None:
    """An absolute XDG variable is used, a relative one ignored for the default below the home:
    the configuration file, the state folder and the service's unit folder follow the one helper
    of the loader (the service module kept a copy of the rule)."""
    from sidecar.clients.service import service_file, xdg_folder
    from sidecar.config.loader import default_config_file, xdg_base

    home = tmp_path / "u"
    assert xdg_base({"XDG_CONFIG_HOME": "rel"}, "XDG_CONFIG_HOME", home) == home / ".config"
    assert xdg_base({"XDG_STATE_HOME": "/abs"}, "XDG_STATE_HOME", home) == Path("/abs")
    assert (
        default_config_file({"XDG_CONFIG_HOME": "rel"}) == Path.home() / ".config" / "sidecar" / "config.yaml"
    )
    cfg = load_config(flags={"home": str(tmp_path / "h")}, env={"XDG_STATE_HOME": "rel"})
    assert cfg.state_dir == Path.home() / ".local" / "state" / "sidecar"
    unit = service_file(cfg, home, platform="linux", env={"XDG_CONFIG_HOME": "rel"})
    assert unit.path == home / ".config" / "systemd" / "user" / "sidecar.service"
    assert xdg_folder({"XDG_CONFIG_HOME": "rel"}, "XDG_CONFIG_HOME") == os.path.realpath(
        Path.home() / ".config"
    )


def test_config_example_write_keeps_a_file_already_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`config example --write` writes the example where the commands read their file (folder
    made), and never over a file already there: the service steps ran `config example >
    "$config"`, and the file a person had written by the quick start was replaced by the example
    (no vault) without a word. It reads no configuration, so a broken file does not stop it."""
    from sidecar.clients.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    for name in [n for n in os.environ if n.startswith("SIDECAR_")]:
        monkeypatch.delenv(name)
    default = tmp_path / "home" / ".config" / "sidecar" / "config.yaml"
    assert main(["config", "example", "--write"]) == 0
    assert default.read_text(encoding="utf-8") == render_example()
    assert f"wrote {default}" in capsys.readouterr().out
    mine = "vault:\n  path: /srv/notes\nsearch:\n  vectorWeight: [\n"  # the person's, broken even
    default.write_text(mine, encoding="utf-8")
    assert main(["config", "example", "--write"]) == 0
    assert default.read_text(encoding="utf-8") == mine
    assert "exists: kept as it is, not overwritten" in capsys.readouterr().out
    # An explicit file, and the one --config names, the same way.
    assert main(["config", "example", "--write", "other/c.yaml", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"file": str(tmp_path / "other/c.yaml"), "written": True}
    assert main(["config", "example", "--write", "--config", "other/c.yaml", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["written"] is False
    assert main(["config", "check", "--write"]) == ExitCode.USAGE
    assert main(["config", "path", "--write"]) == ExitCode.USAGE  # it was ignored without a word
    # A part of the path is a file, or the path a folder: a clear error (mkdir's "File exists").
    (tmp_path / "afile").write_text("x")
    capsys.readouterr()
    assert main(["config", "example", "--write", "afile/c.yaml"]) == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert f"cannot write the example to {tmp_path / 'afile/c.yaml'}" in err and "a part of it a file" in err
    assert main(["config", "example", "--write", "other"]) == ExitCode.CONFIG
    assert "it is a folder" in capsys.readouterr().err


def test_a_windows_path_is_refused_with_what_to_write(tmp_path: Path) -> None:
    """`vault.path: C:\\Users\\me\\Obsidian\\Main` (a Windows user's paste) was read as a
    relative path, joined onto the config file's folder, and accepted; in double quotes, YAML's
    escape error said nothing of quotes. Every path setting, from the file, the environment and a
    flag alike."""
    f = _yaml(tmp_path, "vault:\n  path: C:\\Users\\me\\Obsidian\\Main\n")
    with pytest.raises(ConfigError, match=r"vault.path = 'C:\\\\Users.*' is a Windows path.*Linux and macOS"):
        load_config(config_file=str(f), env={})
    for raw in ("C:/Users/me/Vault", "\\\\nas\\notes"):
        with pytest.raises(ConfigError, match="is a Windows path"):
            load_config(env={"SIDECAR_HOME": raw})
        with pytest.raises(ConfigError, match="is a Windows path"):
            load_config(flags={"vault.path": raw}, env={})
    # In double quotes: YAML's escape error says it is a Windows path (its hint for other escapes,
    # single quotes or forward slashes, led a Windows path to the refusal above, a round later).
    f = _yaml(tmp_path, 'vault:\n  path: "C:\\Users\\me\\Obsidian\\Main"\n')
    with pytest.raises(ConfigError, match=r"invalid YAML.*escape.*a Windows path: .*Linux and macOS") as exc:
        load_config(config_file=str(f), env={})
    assert "single quotes" not in str(exc.value)
    f = _yaml(tmp_path, 'vault:\n  path: "~/notes\\Main"\n')
    with pytest.raises(ConfigError, match=r"invalid YAML.*escape.*single quotes, or a path with forward"):
        load_config(config_file=str(f), env={})
    assert load_config(flags={"vault.path": str(tmp_path / "C:")}, env={}).vault.path == tmp_path / "C:"


def test_config_check_warns_of_a_vault_folder_that_is_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A vault.path that does not exist: `configuration OK` (doctor failed it). A warning, not an
    error: a share not mounted yet is a vault all the same."""
    from sidecar.clients.cli import command_for
    from sidecar.clients.cli_parser import build_parser

    def check(vault: Path) -> str:
        cfg = load_config(flags={"vault.path": str(vault)}, env={"SIDECAR_HOME": str(tmp_path / "h")})
        assert command_for("config")(build_parser().parse_args(["config", "check"]), cfg) == 0
        return capsys.readouterr().out

    out = check(tmp_path / "nothere")
    assert out.startswith("configuration with 1 warning(s)"), out
    assert f"warning: vault.path {tmp_path / 'nothere'} does not exist or is not a folder" in out
    (tmp_path / "vault").mkdir()
    assert check(tmp_path / "vault").startswith("configuration OK")
    # Written but null: `path: ~` (YAML's null) or the example's `path: null` left as it was said
    # "configuration OK" and the daemon indexed no vault. Not written at all: no word.
    for null in ("~", "null", ""):
        f = _yaml(tmp_path, f"vault:\n  path: {null}\n")
        cfg = load_config(config_file=str(f), env={"SIDECAR_HOME": str(tmp_path / "h")})
        assert command_for("config")(build_parser().parse_args(["config", "check"]), cfg) == 0
        out = capsys.readouterr().out
        assert out.startswith("configuration with 1 warning(s)"), out
        assert "warning: vault.path is not set (null): only agents' memory is indexed" in out
        assert "`~` alone is YAML's null" in out
    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path / "h")})
    assert command_for("config")(build_parser().parse_args(["config", "check"]), cfg) == 0
    assert capsys.readouterr().out.startswith("configuration OK")


def test_a_tab_in_the_indentation_says_to_indent_with_spaces(tmp_path: Path) -> None:
    """YAML's own words ("found character '\\t' that cannot start any token") do not say that a
    tab indented the line: the error now does, with the line."""
    f = _yaml(tmp_path, "vault:\n\tpath: /srv/notes\n")
    with pytest.raises(
        ConfigError, match=r"at line 2, column 1: .*\(YAML does not allow tabs .*indent with spaces\)"
    ):
        load_config(config_file=str(f), env={})
