"""Shell completion scripts (bash, zsh, fish) generated from the argument parser, so they never
drift from the commands: subcommands, each one's options, and the fixed choices of positionals
and options (``memory list|write|...``, ``--source vault|wiki|memory``). No third-party library.
"""

from __future__ import annotations

import argparse
from typing import Any

_PATHS = "--config|--history|--home|--socket|--vault"  # options that take a file or folder


def command_tree(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """{command: {"options": [...], "choices": [...positional choices], "optionChoices": {...}}}."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    tree: dict[str, Any] = {}
    for name, p in sub.choices.items():
        options: list[str] = []
        choices: list[str] = []
        option_choices: dict[str, list[str]] = {}
        values: list[str] = []  # options followed by a value of the user's (a number, a name)
        for action in p._actions:
            if action.option_strings:
                long = [o for o in action.option_strings if o.startswith("--")]
                options += long
                if action.choices:
                    for o in action.option_strings:
                        option_choices[o] = [str(c) for c in action.choices]
                elif action.nargs != 0 and not set(long) & set(_PATHS.split("|")):
                    values += action.option_strings  # -n 5 as --limit 5
            elif action.choices:
                choices += [str(c) for c in action.choices]
        tree[name] = {
            "options": options,
            "choices": choices,
            "optionChoices": option_choices,
            "valueOptions": values,
        }
    return tree


def _bash(tree: dict[str, Any]) -> str:
    cases = []
    for name, t in tree.items():
        opt_cases = "".join(
            f'        {o}) COMPREPLY=($(compgen -W "{" ".join(c)}" -- "$cur")); return;;\n'
            for o, c in t["optionChoices"].items()
        )
        if t["valueOptions"]:  # a value of the user's comes next: offer nothing, not even files
            quiet = "COMPREPLY=(); compopt +o default 2>/dev/null; return;;"
            opt_cases += f"        {'|'.join(t['valueOptions'])}) {quiet}\n"
        options = " ".join(t["options"])
        # The positional's choice (memory list|write|...) once: after it, only the options.
        given = " ".join(t["choices"])
        chosen = (
            "      for ((j = i + 1; j < COMP_CWORD; j++)); do\n"
            f'        case " {given} " in *" ${{COMP_WORDS[j]}} "*) words="{options}";; esac\n'
            "      done\n"
            if t["choices"]
            else ""
        )
        cases.append(
            f"    {name})\n"
            f'      case "$prev" in\n{opt_cases}'
            f'        {_PATHS}) COMPREPLY=($(compgen -f -- "$cur")); return;;\n'
            "      esac\n"
            f'      words="{" ".join(t["choices"] + t["options"])}"\n{chosen}'
            '      COMPREPLY=($(compgen -W "$words" -- "$cur"));;\n'
        )
    return (
        '# bash completion for sidecar: eval "$(sidecar completion bash)" (e.g. in ~/.bashrc)\n'
        "_sidecar() {\n"
        '  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmd=""\n'
        "  local i j words\n"
        "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
        '    case "${COMP_WORDS[i]}" in -*) ;; *) cmd="${COMP_WORDS[i]}"; break;; esac\n'
        "  done\n"
        '  if [ -z "$cmd" ]; then\n'
        f'    COMPREPLY=($(compgen -W "{" ".join(tree)} --version --help" -- "$cur")); return\n'
        "  fi\n"
        '  case "$cmd" in\n' + "".join(cases) + "  esac\n}\ncomplete -o default -F _sidecar sidecar\n"
    )


def _zsh(tree: dict[str, Any]) -> str:
    cases = []
    for name, t in tree.items():
        words = " ".join(t["choices"] + t["options"])
        opt_cases = "".join(
            f"      {o}) compadd -- {' '.join(c)}; return;;\n" for o, c in t["optionChoices"].items()
        )
        cases.append(
            f"    {name})\n      case ${{words[CURRENT-1]}} in\n{opt_cases}"
            f"      {_PATHS}) _files; return;;\n"
            f"      esac\n      compadd -- {words};;\n"
        )
    return (
        "#compdef sidecar\n"
        '# zsh completion for sidecar: sidecar completion zsh > "${fpath[1]}/_sidecar" (or eval it)\n'
        "_sidecar() {\n"
        "  if (( CURRENT == 2 )); then\n"
        f"    compadd -- {' '.join(tree)}; return\n"
        "  fi\n"
        "  case ${words[2]} in\n" + "".join(cases) + "  esac\n}\n"
        'if [ "$funcstack[1]" = "_sidecar" ]; then _sidecar "$@"; else compdef _sidecar sidecar; fi\n'
    )


def _fish(tree: dict[str, Any]) -> str:
    lines = [
        "# fish completion for sidecar: sidecar completion fish > ~/.config/fish/completions/sidecar.fish",
        "complete -c sidecar -f",
        f"complete -c sidecar -n __fish_use_subcommand -a '{' '.join(tree)}'",
    ]
    for name, t in tree.items():
        cond = f"__fish_seen_subcommand_from {name}"
        if t["choices"]:
            lines.append(f"complete -c sidecar -n '{cond}' -a '{' '.join(t['choices'])}'")
        for o in t["options"]:
            extra = ""
            if o in t["optionChoices"]:
                extra = f" -x -a '{' '.join(t['optionChoices'][o])}'"
            elif o in ("--config", "--history", "--home", "--socket", "--vault"):
                extra = " -r -F"
            lines.append(f"complete -c sidecar -n '{cond}' -l {o[2:]}{extra}")
    return "\n".join(lines) + "\n"


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    tree = command_tree(parser)
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](tree)
