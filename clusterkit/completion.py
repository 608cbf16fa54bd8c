"""`clusterkit completion bash|zsh`: a completion script made from the argument parser itself,
so it can never fall behind the commands and flags it completes."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping, Sequence

SHELLS = ("bash", "zsh", "fish")


Grafts = dict[str, argparse.ArgumentParser]
# Values of options that take free text but have known answers ("check --skip": the stages,
# "cost --instance": the catalog's), keyed by command path and option.
Values = Mapping[str, Sequence[str]]
# Its values are the inventory's hosts: the script asks `clusterkit completion --hosts FILE`.
HOSTS_OPTION = "--limit"


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


def option_values(
    parser: argparse.ArgumentParser, path: str, grafts: Grafts, known: Values
) -> dict[str, list[str]]:
    """What may follow each option ("check --format": its choices, "check --skip": the
    stages from `known`), keyed by command path and option, for every command."""
    found: dict[str, list[str]] = {}
    for action in parser._actions:
        if not action.option_strings or action.help is argparse.SUPPRESS:
            continue
        long = f"{path} {action.option_strings[-1]}"
        values = [str(v) for v in action.choices] if action.choices else known.get(long)
        for option in action.option_strings if values else ():
            found[f"{path} {option}"] = list(values or ())
    for name, child in _words(parser, path, grafts)[1].items():
        found.update(option_values(child, f"{path} {name}".strip(), grafts, known))
    return found


def _value_cases(values: dict[str, list[str]]) -> list[str]:
    """One `case` arm per option with values ("check --format"): those values."""
    return [
        f"    {shlex.quote(key)}) words={shlex.quote(' '.join(map(shlex.quote, words)))} ;;"
        for key, words in values.items()
    ]


def script(
    parser: argparse.ArgumentParser,
    shell: str,
    grafts: Grafts | None = None,
    known: Values | None = None,
) -> str:
    """The completion script for `shell`; zsh runs the bash one through bashcompinit."""
    grafts = grafts or {}
    body = "\n".join(_cases(parser, "", grafts))
    values = "\n".join(_value_cases(option_values(parser, "", grafts, known or {})))
    bash = f"""# clusterkit completion for bash: eval "$(clusterkit completion bash)"
_clusterkit() {{
  local current=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} path="" word words
  local i inventory=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${{COMP_WORDS[i]}}
    [[ $word == -* ]] && continue
    [[ -f $word ]] && inventory=$word  # the last file named: the inventory, for --limit
    case "${{path:+$path }}$word" in
{_known_paths(parser, "", grafts)}) path="${{path:+$path }}$word" ;;
    esac
  done
  case "$path $prev" in
{values}
    *" {HOSTS_OPTION}")
      words=""
      [[ -n $inventory ]] &&
        words=$("${{COMP_WORDS[0]}}" completion --hosts "$inventory" 2>/dev/null) ;;
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
    if shell == "fish":
        return fish_script(parser, grafts, known or {})
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


def fish_script(parser: argparse.ArgumentParser, grafts: Grafts, known: Values) -> str:
    """fish's own `complete` lines: each command path's subcommands and options, and the
    values an option takes, under a condition on the words typed so far."""
    paths = _known_paths(parser, "", grafts).split("|")
    lines = [
        "# clusterkit completion for fish: clusterkit completion fish | source",
        "function __clusterkit_path",
        "    set -l path ''",
        "    for word in (commandline -opc)[2..-1]",
        "        string match -q -- '-*' $word; and continue",
        '        set -l next (string trim -- "$path $word")',
        f"        contains -- $next {' '.join(paths)}; and set path $next",
        "    end",
        '    test "$path" = "$argv[1]"',
        "end",
        "function __clusterkit_hosts",
        "    set -l words (commandline -opc)",
        "    set -l inventory ''",
        "    for word in $words[2..-1]",
        '        test -f "$word"; and set inventory $word',
        "    end",
        '    test -n "$inventory"; and $words[1] completion --hosts $inventory 2>/dev/null',
        "end",
    ]
    lines += _fish_lines(parser, "", grafts, option_values(parser, "", grafts, known))
    return "\n".join(lines) + "\n"


def _fish_lines(
    parser: argparse.ArgumentParser, path: str, grafts: Grafts, values: dict[str, list[str]]
) -> list[str]:
    """The `complete` lines of one command path, then of the paths below it."""
    when = f"-n \"__clusterkit_path '{path}'\""  # command names: letters and dashes
    options, children = _words(parser, path, grafts)
    lines = [f"complete -c clusterkit {when} -a {shlex.quote(name)}" for name in children]
    for option in options:
        flag = f"-l {option[2:]}" if option.startswith("--") else f"-s {option[1:]}"
        if not option.startswith("-"):  # a positional's choice (`completion fish`)
            lines.append(f"complete -c clusterkit {when} -a {shlex.quote(option)}")
            continue
        taken = values.get(f"{path} {option}")
        given = f" -x -a {shlex.quote(' '.join(taken))}" if taken else ""
        if option == HOSTS_OPTION:
            given = " -x -a '(__clusterkit_hosts)'"
        lines.append(f"complete -c clusterkit {when} {flag}{given}")
    for name, child in children.items():
        lines += _fish_lines(child, f"{path} {name}".strip(), grafts, values)
    return lines
