"""The docs as a reference that cannot go stale: every relative link and anchor in README.md and
docs/ resolves, and every command they show (`python train_main.py`, `python -m myxtts.X`,
`myxtts-X`) names a module that exists and only flags its parser has."""

from __future__ import annotations

import argparse
import glob
import importlib
import inspect
import os
import re
import shlex

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted([os.path.join(REPO, "README.md"), os.path.join(REPO, "samples", "README.md"),
                *glob.glob(os.path.join(REPO, "docs", "*.md"))])
# A link's target: [text](target), outside code spans (removed before matching).
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
SCRIPTS = {"myxtts-train": "train_main", "myxtts-synthesize": "myxtts.synthesize",
           "myxtts-export": "myxtts.export", "myxtts-evaluate": "myxtts.evaluate",
           "myxtts-make-corpus": "myxtts.make_corpus", "myxtts-serve": "myxtts.serve"}
# The end of one command on a line: a pipe, a list operator, a comment, a redirection.
COMMAND_END = {"|", "||", "&&", ";", "&", ">", "2>", "<"}


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped (hyphens and
    underscores kept), spaces to hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: str) -> set:
    found, seen = set(), {}
    for line in FENCE.sub("", read(path)).splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if not count else f"{base}-{count}")
    return found


def links():
    for page in PAGES:
        text = CODE_SPAN.sub("", FENCE.sub("", read(page)))
        for target in LINK.findall(text):
            if not re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                yield page, target


@pytest.mark.parametrize("page", PAGES, ids=lambda p: os.path.relpath(p, REPO))
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for source, target in links():
        if source != page:
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(full):
            broken.append(f"{target}: no file {os.path.relpath(full, REPO)}")
        elif anchor and full.endswith(".md") and anchor not in anchors(full):
            broken.append(f"{target}: no heading with anchor #{anchor} in "
                          f"{os.path.relpath(full, REPO)}")
    assert not broken, f"{os.path.relpath(page, REPO)}: " + "; ".join(broken)


def commands():
    """(page, module, flags) of every command the pages show in code blocks and spans."""
    for page in PAGES:
        text = read(page)
        blocks = [block.strip("`") for block in FENCE.findall(text)]
        blocks += [span.strip("`") for span in CODE_SPAN.findall(FENCE.sub("", text))]
        for block in blocks:
            for line in block.replace("\\\n", " ").splitlines():
                try:
                    words = shlex.split(line, comments=True)
                except ValueError:
                    continue
                yield from _commands_in(page, words)


def _commands_in(page, words):
    for i, word in enumerate(words):
        module = None
        if word == "python" and i + 1 < len(words):
            if words[i + 1] == "train_main.py":
                module, rest = "train_main", words[i + 2:]
            elif words[i + 1] == "-m" and i + 2 < len(words) and \
                    words[i + 2].startswith("myxtts."):
                module, rest = words[i + 2], words[i + 3:]
        elif word in SCRIPTS:
            module, rest = SCRIPTS[word], words[i + 1:]
        if module is None:
            continue
        flags = []
        for arg in rest:
            if arg in COMMAND_END or arg.startswith(">"):
                break
            if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", arg):
                flags.append(arg.split("=")[0])
        yield page, module, flags


def known_flags(module: str) -> set:
    if module == "train_main":
        from absl import flags  # pylint: disable=import-outside-toplevel
        train_main = importlib.import_module("train_main")
        names = set(flags.FLAGS)
        boolean = {name for name in names if isinstance(flags.FLAGS[name], flags.BooleanFlag)}
        return ({f"--{n}" for n in names} | {f"--no{n}" for n in boolean}
                | set(train_main.HELP_FLAGS))
    loaded = importlib.import_module(module + ".__main__" if module == "myxtts.lite" else module)
    if not hasattr(loaded, "build_parser"):  # a module's own few flags (myxtts.config)
        return set(re.findall(r"\"(--[a-z][a-z0-9-]*)\"", inspect.getsource(loaded)))
    parsers, found = [loaded.build_parser()], set()
    while parsers:  # the parser's and its subcommands' flags
        parser = parsers.pop()
        found.update(parser._option_string_actions)  # pylint: disable=protected-access
        for action in parser._actions:  # pylint: disable=protected-access
            if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
                parsers.extend(action.choices.values())
    return found


def test_every_command_in_the_docs_names_a_module_and_flags_that_exist():
    shown = list(commands())
    assert len(shown) > 50, len(shown)  # the scan finds the docs' commands
    stale, flags_of = [], {}
    for page, module, flags in shown:
        if module not in flags_of:
            try:
                flags_of[module] = known_flags(module)
            except (ImportError, AttributeError) as e:
                flags_of[module] = None
                stale.append(f"{os.path.relpath(page, REPO)}: {module} ({e})")
        if flags_of[module] is None:
            continue
        unknown = [flag for flag in flags if flag not in flags_of[module]]
        if unknown:
            stale.append(f"{os.path.relpath(page, REPO)}: {module} has no {', '.join(unknown)}")
    assert not stale, "\n".join(sorted(set(stale)))
