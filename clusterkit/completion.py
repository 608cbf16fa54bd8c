"""`clusterkit completion bash|zsh`: a completion script made from the argument parser itself,
so it can never fall behind the commands and flags it completes."""

from __future__ import annotations

import argparse
import shlex

SHELLS = ("bash", "zsh")


Grafts = dict[str, argparse.ArgumentParser]


def _words(
    parser: argparse.ArgumentParser, path: str = "", grafts: Grafts | None = None
) -> tuple[list[str], dict[str, argparse.ArgumentParser]]:
    """(option strings and positional choices, subcommands) of one parser; grafts add
    commands parsed by a parser of their own ("cost prices")."""
    options: list[str] = []
    children: dict[str, argparse.ArgumentParser] = {
        full.rpartition(" ")[2]: graft
        for full, graft in (grafts or {}).items()
        if full.rpartition(" ")[0] == path
    }
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            children.update(action.choices)
        elif action.help is not argparse.SUPPRESS:
            options.extend(action.option_strings)
            if not action.option_strings and action.choices:  # `completion bash|zsh`
                options.extend(map(str, action.choices))
    return options, children


def _cases(parser: argparse.ArgumentParser, path: str, grafts: Grafts) -> list[str]:
    """One `case` arm per command path ("check", "image build"): what may follow it."""
    options, children = _words(parser, path, grafts)
    words = " ".join(shlex.quote(word) for word in [*children, *options])
    arms = [f"      {shlex.quote(path)}) words={shlex.quote(words)} ;;"]
    for name, child in children.items():
        arms += _cases(child, f"{path} {name}".strip(), grafts)
    return arms


def _value_cases(parser: argparse.ArgumentParser, path: str, grafts: Grafts) -> list[str]:
    """One `case` arm per option with fixed values ("check --format"): those values."""
    arms = []
    for action in parser._actions:
        if action.option_strings and action.choices and action.help is not argparse.SUPPRESS:
            values = " ".join(shlex.quote(str(value)) for value in action.choices)
            for option in action.option_strings:
                arms.append(
                    f"    {shlex.quote(f'{path} {option}')}) words={shlex.quote(values)} ;;"
                )
    for name, child in _words(parser, path, grafts)[1].items():
        arms += _value_cases(child, f"{path} {name}".strip(), grafts)
    return arms


def script(parser: argparse.ArgumentParser, shell: str, grafts: Grafts | None = None) -> str:
    """The completion script for `shell`; zsh runs the bash one through bashcompinit."""
    grafts = grafts or {}
    body = "\n".join(_cases(parser, "", grafts))
    values = "\n".join(_value_cases(parser, "", grafts))
    bash = f"""# clusterkit completion for bash: eval "$(clusterkit completion bash)"
_clusterkit() {{
  local current=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} path="" word words
  local i
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${{COMP_WORDS[i]}}
    [[ $word == -* ]] && continue
    case "${{path:+$path }}$word" in
{_known_paths(parser, "", grafts)}) path="${{path:+$path }}$word" ;;
    esac
  done
  case "$path $prev" in
{values}
    *)
      case "$path" in
{body}
      *) words="" ;;
      esac ;;
  esac
  COMPREPLY=($(compgen -W "$words" -- "$current"))
  [[ ${{#COMPREPLY[@]}} -eq 0 && $current != -* ]] && COMPREPLY=($(compgen -f -- "$current"))
  return 0
}}
complete -o filenames -F _clusterkit clusterkit
"""
    if shell == "bash":
        return bash
    return (
        '# clusterkit completion for zsh: eval "$(clusterkit completion zsh)"\n'
        "autoload -U +X bashcompinit && bashcompinit\n" + bash.split("\n", 1)[1]
    )


def _known_paths(parser: argparse.ArgumentParser, path: str, grafts: Grafts) -> str:
    """The command paths as one `case` pattern: "check|image|image build|..."."""
    _, children = _words(parser, path, grafts)
    paths: list[str] = []
    for name, child in children.items():
        full = f"{path} {name}".strip()
        paths.append(shlex.quote(full))
        nested = _known_paths(child, full, grafts)
        if nested:
            paths.append(nested)
    return "|".join(paths)
