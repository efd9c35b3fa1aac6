"""The front door and the docs: README stays short and undated, every local link resolves, and every command
the docs tell a user to type names a module, flags, recipe, overrides and files that exist."""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
import warnings
from unittest import mock

import pytest

from tests.conftest import REPO

LINK = re.compile(r"\]\(([^)#\s]*)(#[^)]*)?\)")


def test_readme_is_a_front_door():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= 12 * 1024
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "dated timings belong in bench/RESULTS.md"
    # the two commands CI and a new user run
    assert "pip install torch==2.13.0 && pip install -e . && torchrun --standalone --nproc-per-node 2 -m trainer" in text
    assert ('pip install torch==2.13.0 && pip install --no-deps torchvision==0.28.0 && pip install -e ".[test]" '
            "&& python -m pytest -q") in text
    assert "docs/index.md" in text and "docs/architecture.md" in text


def test_every_local_link_resolves():
    broken = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target, _ in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert not broken, "\n".join(broken)


def _heading_anchors(page) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    anchors, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#+\s+(.*)", line)):
            anchors.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return anchors


def test_every_link_anchor_names_a_heading():
    broken = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target, anchor in LINK.findall(page.read_text(encoding="utf-8")):
            linked = page.parent / target if target else page
            if anchor and not re.match(r"[a-z]+:", target) and linked.suffix == ".md" and linked.exists():
                if anchor[1:] not in _heading_anchors(linked):
                    broken.append(f"{page.relative_to(REPO)} -> {target}{anchor}")
    assert not broken, "\n".join(broken)


def test_every_doc_is_in_the_index():
    index = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    missing = [p.name for p in (REPO / "docs").glob("*.md") if p.name != "index.md" and f"({p.name})" not in index]
    assert not missing, missing


# --- The commands the docs tell a user to type -------------------------------------------------------------
# Every `python -m MODULE ...` (or `torchrun ... -m MODULE ...`) shown in the README, docs/, bench/*.md or a
# recipe's comments must name a module of this project that runs as a program, and every `--flag` it shows must
# be one that module's own argparse parser accepts. The parsers are caught in-process (parse_args is stopped as
# it starts), so nothing runs and no process is started.

PROJECT_PACKAGES = ("trainer", "telemetry", "launch", "bench", "tools")
MODULE_CALL = re.compile(r"(?:\bpython3?|\btorchrun\b[^`#\n]*?)\s+-m\s+([A-Za-z_][\w.]*)(.*)")
FLAG = re.compile(r"^\[?(--[A-Za-z][\w-]*)")


def _doc_sources():
    """(where, markdown text) per documentation source; a recipe's comments are a shell block."""
    pages = ["README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")), "bench/README.md",
             "bench/RESULTS.md", "bench/gpu/RESULTS.md"]
    for page in pages:
        yield page, (REPO / page).read_text(encoding="utf-8")
    for recipe in sorted((REPO / "recipes").rglob("*.yaml")):
        comments = [ln.strip()[1:].strip() if ln.strip().startswith("#") else "" for ln in
                    recipe.read_text(encoding="utf-8").splitlines()]
        yield str(recipe.relative_to(REPO)), "```\n" + "\n".join(comments) + "\n```"


def _command_lines(text: str):
    """(line number, command): the lines of code blocks, fenced or indented (continuations joined), and the
    inline code spans."""
    fenced, indented, pending, start, prose = False, False, "", 0, []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            fenced = not fenced
            prose.append("")
            continue
        # an indented block: 4 spaces after a blank line (list items continue with 2)
        indented = line.startswith("    ") and line.strip() != "" and (indented or not prose or prose[-1] == "")
        prose.append("" if fenced or indented else line)
        if not (fenced or indented):
            continue
        body = line.strip().removeprefix("$ ")
        if pending:
            body = pending + " " + body
        else:
            start = number
        if body.endswith("\\"):
            pending = body[:-1].rstrip()
            continue
        pending = ""
        yield start, body
    prose_text = "\n".join(prose)
    for span in re.finditer(r"`([^`]+)`", prose_text):  # a span may run over a line break
        yield prose_text.count("\n", 0, span.start()) + 1, " ".join(span.group(1).split())


def documented_module_calls():
    """(where, module, the words after it) for every project module a doc tells a user to run."""
    seen = set()
    for where, text in _doc_sources():
        for number, command in _command_lines(text):
            for module, rest in MODULE_CALL.findall(command):
                if module.split(".")[0] not in PROJECT_PACKAGES or not module.islower():
                    continue  # other programs (pytest, pip), and placeholders such as bench.NAME
                rest = re.split(r"\s#\s|\s#$|\s>\s|&&|;", rest)[0]
                key = (where, module, rest.strip())
                if key not in seen:
                    seen.add(key)
                    yield f"{where}:{number}", module, rest.strip()


class _Caught(Exception):
    def __init__(self, parser):
        self.parser = parser


def _no_process(*args, **kwargs):
    raise AssertionError("started a process before parsing its arguments")


def module_parser(module: str) -> argparse.ArgumentParser | None:
    """The parser `python -m MODULE` builds, caught as it starts parsing (None: the module takes no options)."""
    def caught(self, *args, **kwargs):
        raise _Caught(self)

    patches = {(argparse.ArgumentParser, "parse_known_args"): caught,
               (argparse.ArgumentParser, "parse_known_intermixed_args"): caught,
               (subprocess, "Popen"): _no_process, (os, "fork"): _no_process}
    saved = {key: getattr(*key) for key in patches}
    argv = sys.argv
    try:
        for (owner, name), value in patches.items():
            setattr(owner, name, value)
        sys.argv = [module]
        # patch.dict: os.environ as it was afterwards, whatever the module's main sets before it parses (a
        # leaked TORCH_DISABLE_SHARE_RDZV_TCP_STORE reached every later torchrun run of the suite)
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), mock.patch.dict(os.environ):
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module is already imported as launch.X
            runpy.run_module(module, run_name="__main__", alter_sys=False)
    except _Caught as exc:
        return exc.parser
    except SystemExit:
        return None
    finally:
        sys.argv = argv
        for (owner, name), value in saved.items():
            setattr(owner, name, value)
    return None


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_documented_module_runs_as_a_program():
    missing = []
    for where, module, _ in documented_module_calls():
        spec = importlib.util.find_spec(module)
        if spec is None:
            missing.append(f"{where}: python -m {module}: no such module")
        elif spec.submodule_search_locations is not None:
            if importlib.util.find_spec(module + ".__main__") is None:
                missing.append(f"{where}: python -m {module}: a package without __main__.py")
        elif '__name__ == "__main__"' not in open(spec.origin, encoding="utf-8").read():
            missing.append(f"{where}: python -m {module}: the module does nothing when run")
    assert not missing, "\n".join(missing)


def test_every_documented_flag_is_accepted():
    parsers, wrong = {}, []
    for where, module, rest in documented_module_calls():
        try:
            words = shlex.split(rest)
        except ValueError:
            words = rest.split()
        if "--" in words:  # what follows belongs to the recipe or the wrapped command
            words = words[:words.index("--")]
        flags = [m.group(1) for w in words if (m := FLAG.match(w))]
        if module not in parsers:
            parsers[module] = module_parser(module)
        parser = parsers[module]
        if parser is None:
            if flags:
                wrong.append(f"{where}: python -m {module} takes no options, but the doc gives {' '.join(flags)}")
            continue
        if subcommands := _subcommands(parser):  # python -m telemetry SUBCOMMAND: it must be one
            named = next((w for w in words if not w.startswith("-")), "")
            if not named or any(name not in subcommands for name in named.split("|")):
                wrong.append(f"{where}: python -m {module} {named}: not a subcommand; allowed: "
                             f"{', '.join(subcommands)}")
                continue
            parser = subcommands[named.split("|")[0]]
        allowed = set(parser._option_string_actions)
        for flag in flags:
            if flag not in allowed:
                wrong.append(f"{where}: python -m {module} {' '.join(words[:1])}: {flag} is not an option "
                             f"(allowed: {', '.join(sorted(a for a in allowed if a.startswith('--')))})")
    assert not wrong, "\n".join(wrong)


def test_every_documented_repository_path_exists():
    """Recipes, scripts and files named by their path from the repository root exist."""
    path = re.compile(r"(?<![\w/.-])((?:recipes|launch|bench|tools|tests|trainer|telemetry)/[\w/.-]*"
                      r"\.(?:yaml|py|sh|sbatch|md|txt|jsonl|json|parquet))\b")
    missing = []
    for where, text in _doc_sources():
        for number, line in enumerate(text.splitlines(), 1):
            for target in path.findall(line):
                if "NAME" not in target and not (REPO / target).exists():  # NAME: a placeholder
                    missing.append(f"{where}:{number}: {target}")
    assert not missing, "\n".join(missing)


def test_every_bench_script_answers_help():
    """bench/README.md: `python -m bench.NAME --help` lists a script's options, so each parses before it works."""
    silent = []
    for script in sorted((REPO / "bench").glob("*.py")):
        if script.name != "__init__.py" and module_parser(f"bench.{script.stem}") is None:
            silent.append(script.name)
    assert not silent, f"no argparse parser: {silent}"


RECIPE_TAKERS = ("trainer", "launch.lab", "launch.stage", "launch.nemo", "launch.evaluate")


def documented_bad_inputs():
    """(where, command, the error lines shown under it) for each `$ python -m trainer ...` example of bad input."""
    for where, text in _doc_sources():
        lines = text.splitlines()
        for number, line in enumerate(lines, 1):
            if line.startswith("$ python -m trainer "):
                shown = []
                for after in lines[number:]:
                    if not after.startswith("error: "):
                        break
                    shown.append(after)
                if shown:
                    yield f"{where}:{number}", line[2:], shown


def test_documented_bad_input_prints_what_the_doc_shows():
    from trainer.config import RecipeError, load_recipe
    examples = list(documented_bad_inputs())
    assert examples, "docs/recipes.md shows a bad-input example"
    for where, command, shown in examples:
        recipe, *overrides = shlex.split(command)[3:]
        with pytest.raises(RecipeError) as caught:
            load_recipe(str(REPO / recipe), overrides)
        assert sorted(f"error: {p}" for p in caught.value.problems) == sorted(shown), where


def test_every_documented_override_binds():
    """The recipe and key=value overrides a documented command gives load and check (the trainer's own loader)."""
    from trainer.config import RecipeError, load_recipe
    wrong, bad_on_purpose = [], {where for where, _, _ in documented_bad_inputs()}
    for where, module, rest in documented_module_calls():
        if module not in RECIPE_TAKERS or where in bad_on_purpose:
            continue
        try:
            words = shlex.split(rest)
        except ValueError:
            continue
        if module == "launch.lab":
            words = words[words.index("--") + 1:] if "--" in words else []
        recipes = [w for w in words if re.fullmatch(r"recipes/[\w/.-]+\.yaml", w)]
        overrides = [w for w in words if re.fullmatch(r"[a-z_]+(\.[a-z_]+)*=.*", w) and "..." not in w
                     and "<" not in w and not w.startswith("key=")]
        if len(recipes) != 1 or not (REPO / recipes[0]).is_file() or module == "launch.evaluate":
            continue
        try:
            load_recipe(str(REPO / recipes[0]), overrides)
        except RecipeError as exc:
            wrong.append(f"{where}: {recipes[0]} {' '.join(overrides)}: " + "; ".join(exc.problems))
    assert not wrong, "\n".join(wrong)


OVERRIDE = re.compile(r"^(?:(?:train|data|model|lora|parallel|distributed|fabric|sweep|debug|telemetry|deepspeed)"
                      r"\.[a-z_][a-z0-9_.]*|output_dir|max_steps|seed|name)=\S+$")


def test_every_override_shown_in_the_docs_binds_in_some_recipe():
    """A `key=value` in prose (`debug.delay_rank=1`, `telemetry.bmc=ipmitool`) is a real key of a shipped recipe."""
    from trainer.config import RecipeError, load_recipe
    recipes = [str(REPO / "recipes" / f"{name}.yaml") for name in
               ("tiny_llama_lora", "tiny_bert", "tiny_resnet", "collectives", "tiny_llama_full")]
    bad_on_purpose = {w for _, command, _ in documented_bad_inputs() for w in command.split()}
    checked, wrong = set(), []
    for where, text in _doc_sources():
        for number, span in _command_lines(text):
            try:
                words = shlex.split(span)
            except ValueError:
                words = span.split()
            for word in words:
                value = word.partition("=")[2]
                if (not OVERRIDE.match(word) or word in checked or word in bad_on_purpose or "..." in word
                        or "<" in word or "|" in value or re.fullmatch(r"[A-Z_]+", value)):  # placeholders
                    continue
                checked.add(word)
                problems = []
                # alone, or with the overrides shown beside it (a targets directory needs telemetry.prometheus set)
                together = [w for w in words if OVERRIDE.match(w) and "..." not in w and "<" not in w]
                for recipe, overrides in ((r, o) for o in ([word], together) for r in recipes):
                    try:
                        load_recipe(recipe, overrides)
                        break
                    except RecipeError as exc:
                        problems = problems or exc.problems
                else:
                    wrong.append(f"{where}:{number}: {word}: {problems[0]}")
    assert checked, "no key=value found in the docs: the reader is broken"
    assert not wrong, "\n".join(wrong)


WRAPPED = ("launch.torchrun",)  # torch's own parser: torchrun's options are torch's documentation


def test_every_option_of_our_commands_is_documented():
    """The reverse of the flag check: each option a documented command of ours accepts is named in some doc
    (`launch.linktest --qps`, `--ib-port` and `--timeout-s` were in `--help` only)."""
    docs = "\n".join(text for _, text in _doc_sources())
    modules = sorted({m for _, m, _ in documented_module_calls() if m.split(".")[0] in ("trainer", "telemetry", "launch")
                      and m not in WRAPPED})
    undocumented = []
    for module in modules:
        parser = module_parser(module)
        if parser is None:
            continue
        for name, sub in (_subcommands(parser) or {"": parser}).items():
            for option in sub._option_string_actions:
                if option.startswith("--") and option != "--help" and not re.search(re.escape(option) + r"(?![\w-])", docs):
                    undocumented.append(f"python -m {module} {name} {option}".replace("  ", " "))
    assert not undocumented, "options in --help that no doc names:\n" + "\n".join(undocumented)


def test_every_telemetry_command_is_under_the_bad_input_rule():
    """docs/recipes.md lists the command lines that exit 2 with one `error:` line, and says
    tests/test_cli_bad_input.py runs one row per entry point: every `python -m telemetry` subcommand is in
    both (nccl-log was in neither)."""
    from tests.test_cli_bad_input import ROWS

    commands = set(_subcommands(module_parser("telemetry")))
    listed = re.search(r"`python -m telemetry ([\w|-]+)`", (REPO / "docs" / "recipes.md").read_text(encoding="utf-8"))
    assert listed and set(listed.group(1).split("|")) == commands, (listed and listed.group(1), sorted(commands))
    rows = {argv[1] for _, argv, _, _ in ROWS if argv[0] == "telemetry" and len(argv) > 1}
    assert commands <= rows, f"no row in tests/test_cli_bad_input.py for: {sorted(commands - rows)}"
