#!/usr/bin/env python3
"""Runs the command sessions shown in README.md and checks that they still print what it says.

A session is a fenced block whose lines start with "$ " (a command) followed by the lines it
prints (standard output and standard error together). Each block runs as one bash script in a
fresh folder that links the repository's top-level entries, with the built tools first on PATH
and build/release pointing at the build being checked, so the commands read as a user types them
from a checkout. A command's exit status carries to the next ("$ echo $?").

What may differ is said on an HTML comment right above the block, never guessed:
  <!-- readme: times -->                 durations with a unit (12.3 ms, 4 s, 9 us) may differ
  <!-- readme: numbers=2% -->            every number may differ by 2% (or 0.001 absolute)
  <!-- readme: vary=key1,key2 -->        the values of these JSON keys may differ
  <!-- readme: setup="COMMAND" -->       runs COMMAND (hidden) before the block
  <!-- readme: skip="why" -->            not run (the reason is printed)
In the expected output a line "..." (or one starting with "...") stands for any number of lines,
"..." inside a line for any text, and "  # words" after a line's text is a note to the reader,
not output.

  scripts/readme-examples.py                   # check every session against build/release
  scripts/readme-examples.py --build build/ci  # against another build
  scripts/readme-examples.py --update          # write what the commands print now into README.md
  scripts/readme-examples.py --only plan       # the sessions whose commands contain "plan"

Exit status: 0 all match, 1 a mismatch (each shown as a diff), 2 bad usage.
"""
import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MARKER = "@@readme-examples:{}@@"
NOTE = re.compile(r"^(.*?\S)\s{2,}# .*$")
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
DURATION = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?=\s?(?:s|ms|us|µs|ns|min)\b)")


@dataclass
class Command:
    text: str                      # what follows "$ "
    line: int                      # its line number in the README (0-based)
    expected: list = field(default_factory=list)   # (line number, text) of the lines shown


@dataclass
class Session:
    start: int                     # line of the opening fence
    end: int                       # line of the closing fence
    commands: list
    options: dict


def parse_options(comment):
    options = {}
    for token in shlex.split(comment):
        key, _, value = token.partition("=")
        options[key] = value if value else True
    return options


def sessions_of(lines):
    found, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        start, info = i, lines[i][3:].strip()
        end = start + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        body = lines[start + 1:end]
        if not info and body and body[0].startswith("$ "):
            options = {}
            j = start - 1
            while j >= 0 and lines[j].strip().startswith("<!-- readme:"):
                options.update(parse_options(lines[j].strip()[len("<!-- readme:"):-len("-->")]))
                j -= 1
            commands = []
            for k, text in enumerate(body, start=start + 1):
                if text.startswith("$ "):
                    commands.append(Command(text[2:], k))
                else:
                    commands[-1].expected.append((k, text))
            found.append(Session(start, end, commands, options))
        i = end + 1
    return found


def run_session(session, build, timeout):
    """Runs the block's commands in one bash process; returns each command's output lines."""
    with tempfile.TemporaryDirectory(prefix="readme-examples-") as folder:
        sandbox = Path(folder)
        for entry in REPO.iterdir():
            if entry.name not in ("build", ".git"):
                (sandbox / entry.name).symlink_to(entry)
        (sandbox / "build").mkdir()
        (sandbox / "build" / "release").symlink_to(build)
        (sandbox / "build" / "libtorch").symlink_to(REPO / "build" / "libtorch")
        script = ["set +e"]
        if isinstance(session.options.get("setup"), str):
            script.append(session.options["setup"] + " >/dev/null 2>&1")
        script.append("__status=0")
        for n, command in enumerate(session.commands):
            script.append(f"echo '{MARKER.format(n)}'")
            script.append(f"(exit $__status); {command.text}")
            script.append("__status=$?")
        path = os.pathsep.join(str(build / d) for d in ("sim", "exec", "gui")) + os.pathsep + os.environ["PATH"]
        env = dict(os.environ, PATH=path, COLUMNS="200", LC_ALL="C.UTF-8")
        # Line-buffered, so that what a command prints to its two streams interleaves as on a
        # terminal (stdbuf's setting is inherited by every program the session starts).
        done = subprocess.run(["stdbuf", "-oL", "-eL", "bash", "-c", "\n".join(script)], cwd=sandbox, env=env,
                              stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    outputs, current = [], None
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        if line.startswith("@@readme-examples:") and line.endswith("@@"):
            current = []
            outputs.append(current)
        elif current is not None:
            current.append(line)
    if len(outputs) != len(session.commands):
        raise RuntimeError(f"the session stopped after {len(outputs)} of {len(session.commands)} commands")
    return outputs


def shown_text(line):
    match = NOTE.match(line)
    return match.group(1) if match else line.rstrip()


def is_elision(line):
    return line.strip().startswith("...")


class LineRule:
    """Whether an output line is what the README shows, under the block's options."""

    def __init__(self, options):
        self.times = "times" in options
        number = options.get("numbers")
        self.relative = float(number.rstrip("%")) / 100 if isinstance(number, str) else None
        keys = options.get("vary")
        self.vary = [k for k in keys.split(",") if k] if isinstance(keys, str) else []

    def _mask(self, line):
        for key in self.vary:
            line = re.sub(r'("%s":\s*)(\[[^\]]*\]|[^,}\]]+)' % re.escape(key), r"\1<varies>", line)
        if self.times:
            line = DURATION.sub("<time>", line)
        return line

    def matches(self, shown, printed):
        shown, printed = self._mask(shown), self._mask(printed)
        if shown == printed:
            return True
        if "..." in shown:  # the elided part of a long line
            pattern = ".*".join(re.escape(part) for part in shown.split("..."))
            return re.fullmatch(pattern, printed) is not None
        if not (self.times or self.vary or self.relative is not None):
            return False
        # A value of another width moves the columns after it: spacing is not compared then.
        if shown.split() == printed.split():
            return True
        if self.relative is None:
            return False
        if [t.split() for t in NUMBER.split(shown)] != [t.split() for t in NUMBER.split(printed)]:
            return False
        for x, y in zip(NUMBER.findall(shown), NUMBER.findall(printed)):
            x, y = float(x), float(y)
            if abs(x - y) > self.relative * max(abs(x), 1e-6):
                return False
        return True


def align(shown, printed, rule):
    """Maps each shown line to the printed line it stands for, '...' taking any run of lines.
    Returns the mapping (None for an elision) or None when the output does not match."""
    memo = {}

    def walk(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(shown):
            result = [] if j == len(printed) else None
        elif is_elision(shown[i]):
            result = None
            for k in range(j, len(printed) + 1):
                rest = walk(i + 1, k)
                if rest is not None:
                    result = [None] + rest
                    break
        elif j < len(printed) and rule.matches(shown[i], printed[j]):
            rest = walk(i + 1, j + 1)
            result = None if rest is None else [j] + rest
        else:
            result = None
        memo[(i, j)] = result
        return result

    sys.setrecursionlimit(max(10000, 4 * (len(shown) + len(printed))))
    return walk(0, 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("readme", nargs="?", default=str(REPO / "README.md"))
    parser.add_argument("--build", default=os.environ.get("PIPESCOPE_BUILD_DIR", "build/release"),
                        help="the build whose ppsim, pprun and ppview run the commands (default build/release)")
    parser.add_argument("--update", action="store_true", help="write the printed output into the README")
    parser.add_argument("--only", help="only the sessions with a command containing this text")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a session may take (default 600)")
    args = parser.parse_args()
    build = (REPO / args.build).resolve() if not os.path.isabs(args.build) else Path(args.build)
    if not (build / "sim" / "ppsim").exists():
        print(f"readme-examples: error: no ppsim in {build}/sim (build first, or give --build)", file=sys.stderr)
        return 2
    readme = Path(args.readme)
    lines = readme.read_text(encoding="utf-8").split("\n")
    failures = checked = 0
    replacements = {}
    for session in sessions_of(lines):
        title = session.commands[0].text
        if args.only and not any(args.only in c.text for c in session.commands):
            continue
        if "skip" in session.options:
            print(f"readme-examples: skipped (line {session.start + 1}): {session.options['skip']}: $ {title}")
            continue
        checked += 1
        try:
            outputs = run_session(session, build, args.timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            failures += 1
            print(f"readme-examples: README.md:{session.start + 1}: $ {title}: {e}")
            continue
        rule = LineRule(session.options)
        for command, printed in zip(session.commands, outputs):
            shown = [shown_text(text) for _, text in command.expected]
            mapping = align(shown, printed, rule)
            if mapping is not None:
                # It still prints what the README says (timings and noted variation aside): left
                # as it is, so that --update changes only what no longer holds.
                continue
            if args.update and not any(is_elision(s) for s in shown):
                first = command.line + 1
                replacements[(first, first + len(shown))] = printed
                continue
            failures += 1
            print(f"readme-examples: README.md:{command.line + 1}: `{command.text}` prints something else:")
            for diff in difflib.unified_diff(shown, printed, "README.md", "printed", lineterm="", n=2):
                print("    " + diff)
    if args.update and replacements:
        for key in sorted(replacements, key=lambda k: k if isinstance(k, int) else k[0], reverse=True):
            if isinstance(key, int):
                lines[key] = replacements[key]
            else:
                lines[key[0]:key[1]] = replacements[key]
        tmp = readme.with_suffix(".md.tmp")
        tmp.write_text("\n".join(lines), encoding="utf-8")
        tmp.replace(readme)
        print(f"readme-examples: updated {len(replacements)} place(s) in {readme}")
    status = "updated" if args.update else ("FAILED" if failures else "ok")
    print(f"readme-examples: {checked} session(s) run, {failures} mismatch(es): {status}")
    return 1 if failures and not args.update else 0


if __name__ == "__main__":
    sys.exit(main())
