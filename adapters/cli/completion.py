"""`convstore completion bash|zsh`: a shell completion script, made from the parser itself.

The script completes command names, each command's options, the choices of options that
have them (providers, formats) and file names elsewhere. zsh runs the bash script through
`bashcompinit`, so both shells complete alike. Install it with, for example,
`convstore completion bash > ~/.local/share/bash-completion/completions/convstore`, or
`eval "$(convstore completion zsh)"` in `~/.zshrc`.
"""

from __future__ import annotations

import argparse

from convstore.adapters.cli.registry import PROG, Session, command


def _completion_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=("bash", "zsh"), help="the shell to complete in")


@command("completion", "print a shell completion script (bash or zsh)", _completion_arguments)
def completion(args: argparse.Namespace, session: Session) -> int:
    """The script on stdout; it never opens a store."""
    from convstore.adapters.cli.program import build_parser

    script = bash_script(build_parser())
    if args.shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    session.out.write(script)
    return 0


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps them nowhere public
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> tuple[list[str], dict[str, list[str]]]:
    """A parser's option strings, and what may follow each option that takes a value:
    its choices, or nothing (a file name, or free text)."""
    options: list[str] = []
    choices: dict[str, list[str]] = {}
    for action in parser._actions:
        options.extend(action.option_strings)
        if action.option_strings and action.nargs != 0:
            for option in action.option_strings:
                choices[option] = []
        values = action.choices
        if action.option_strings and values is None and action.metavar:
            metavar = str(action.metavar)
            if metavar.startswith("{") and metavar.endswith("}"):
                values = metavar[1:-1].split(",")
        if action.option_strings and values is not None:
            for option in action.option_strings:
                choices[option] = [str(value) for value in values]
    return options, choices


def bash_script(parser: argparse.ArgumentParser) -> str:
    """The bash completion function for `parser`'s program, and its registration."""
    import shlex

    commands = _subparsers(parser)
    global_options, _ = _options(parser)
    cases: list[str] = []
    for name, sub in commands.items():
        options, choices = _options(sub)
        positional = [a for a in sub._actions if not a.option_strings and a.choices is not None]
        words = options + [str(c) for a in positional for c in a.choices or ()]
        cases.append(f"    {shlex.quote(name)}) words={shlex.quote(' '.join(words))} ;;")
        for option, values in choices.items():
            cases.append(
                f"    {shlex.quote(name)}:{shlex.quote(option)}) "
                f"words={shlex.quote(' '.join(values))} ;;"
            )
    function = f"_{PROG}_complete"
    return f"""# {PROG} completion for bash (and zsh through bashcompinit)
{function}() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
  local command="" i=1 words
  while [ $i -lt $COMP_CWORD ]; do
    case "${{COMP_WORDS[i]}}" in
      --db) i=$((i + 1)) ;;
      -*) ;;
      *) command="${{COMP_WORDS[i]}}"; break ;;
    esac
    i=$((i + 1))
  done
  if [ -z "$command" ]; then
    words={shlex.quote(" ".join([*commands, *global_options]))}
  else
    case "$command:$prev" in
{chr(10).join(c for c in cases if ":" in c.split(")")[0])}
      *)
        case "$command" in
{chr(10).join(c for c in cases if ":" not in c.split(")")[0])}
          *) words="" ;;
        esac ;;
    esac
  fi
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F {function} {PROG}
"""
