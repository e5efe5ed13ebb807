"""Keyword arguments as a ppsim command's options.

The Python functions take the command lines' options as keyword arguments (SPEC.md section 10):
``f_cost=1`` is ``--f-cost 1``, ``steady_state=True`` is ``--steady-state``, a list is its
comma-separated form. The command itself parses them, so defaults, checks and messages are the
command line's own; an option it does not know is refused by name.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping

from . import _core
from .errors import Error


def option_args(options: Mapping[str, Any]) -> list[str]:
    """``{"f_cost": 1, "json": True, "schedules": ["1f1b", "zbv"]}`` -> ``--f-cost 1 --json --schedules 1f1b,zbv``.

    A list of lists gives the option once per inner list, for the options a command takes more than
    once: ``{"recompute_modules": [["moe_act"], ["moe_act", "layernorm"]]}`` ->
    ``--recompute-modules moe_act --recompute-modules moe_act,layernorm``.
    """
    args: list[str] = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, (list, tuple)) for v in value):
            for inner in value:
                args += [flag, ",".join(_text(v) for v in inner)]
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(_text(v) for v in value)]
        else:
            args += [flag, _text(value)]
    return args


def _text(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)  # every digit: 0.1 stays 0.1, 1e-06 stays exact
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def run(command: str, args: Iterable[str]) -> "_core.CommandOutput":
    """Runs ``ppsim COMMAND ARGS...`` in this process; its errors arrive as pipescope.errors' classes."""
    output = _core.run_command(command, list(args))
    if output.status != 0:
        lines = [line for line in output.err.splitlines() if line.strip()]
        raise Error(lines[-1].removeprefix("ppsim: error: ") if lines else f"ppsim {command} exited {output.status}")
    return output


def run_json(command: str, args: Iterable[str]) -> tuple[Any, list[str]]:
    """The JSON a command printed, and its note lines (from its standard error)."""
    output = run(command, args)
    return json.loads(output.out), notes_of(output.err)


def notes_of(err: str) -> list[str]:
    """The note lines of a command's standard error (progress bars left out)."""
    return [line for line in err.splitlines() if line.strip() and "\r" not in line and not line.startswith("[")]
