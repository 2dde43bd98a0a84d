"""README.md (for users) and DEVELOPING.md (for maintainers): DEVELOPING.md's Tools section lists every module under
tools/ once, the tools (modules with a main(), which `python -m tools.<pipeline>.<step>` runs) in the tool table and
the libraries (no main()) in the library table, and its Make targets table lists the Makefile's targets; the README's
glossary defines terms the cards use, and its numbers come from records (make cards writes its tables) and nowhere
else."""

import ast
import re

from helpers import ROOT
from tools import cards


def has_main(path):
    """Whether a module defines main() at its top level."""
    return any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in ast.parse(path.read_text()).body)


def section(document, title):
    return (ROOT / document).read_text().split(f"\n## {title}\n")[1].split("\n## ")[0]


def test_the_tool_table_lists_the_tools_and_the_library_table_the_libraries():
    tables, header = {}, None
    for line in section("DEVELOPING.md", "Tools").splitlines():
        if line.startswith("| ") and not line.startswith("| `"):
            header = line.split("|")[1].strip()
        elif line.startswith("| `tools/"):
            tables.setdefault(header, []).append(re.match(r"\| `(tools/[^`]+)`", line)[1].rstrip("/"))
    modules = {path.relative_to(ROOT).as_posix(): has_main(path) for path in (ROOT / "tools").rglob("*.py")
               if path.name != "__init__.py"}
    assert sorted(tables) == ["library", "tool"]
    assert sorted(tables["tool"]) == sorted(name for name, tool in modules.items() if tool)
    assert sorted(tables["library"]) == sorted(name for name, tool in modules.items() if not tool)


def test_the_make_targets_table_lists_every_target_of_the_makefile():
    targets = re.findall(r"^([a-z-]+):.*## ", (ROOT / "Makefile").read_text(), flags=re.MULTILINE)
    listed = [name for cell in re.findall(r"^\| (`make [^|]+`) \|", section("DEVELOPING.md", "Make targets"),
                                          flags=re.MULTILINE)
              for name in re.findall(r"`make ([a-z-]+)`", cell)]
    assert sorted(listed) == sorted(targets)


def glossary_terms():
    """The bold terms the README's glossary defines ("budget and preset" defines both)."""
    return [term for line in section("README.md", "Glossary").splitlines() if line.startswith("- ")
            for term in re.findall(r"\*\*([^*]+)\*\*", line)]


def test_every_glossary_term_is_used_in_a_card():
    terms = glossary_terms()
    assert {"AMOE", "arm", "collective", "roster", "budget", "preset", "STS-8", "m_acc", "win rate",
            "spliced tails"} <= set(terms)
    used = " ".join((ROOT / folder / "README.md").read_text() for folder in cards.registry.BY_FOLDER)
    used = used.replace("-", " ").lower()  # "spliced-tails" in a card is the glossary's "spliced tails"
    assert [term for term in terms if term.replace("-", " ").lower() not in used] == []


GENERATED = re.compile(r"<!-- (\w+): written by `make cards` from records/ -->\n.*?<!-- end of \1 -->", flags=re.DOTALL)
MEASURE = re.compile(r"\d\.\d\d")  # a score or a time with two decimals: only the generated tables may print one


def test_the_readme_s_measured_numbers_are_only_in_the_tables_make_cards_writes():
    readme = (ROOT / "README.md").read_text()
    sections = [match[1] for match in GENERATED.finditer(readme)]
    assert sections == ["models", "commands", "measured"]
    typed = cards.CODE_BLOCK.sub("", GENERATED.sub("", readme))
    assert MEASURE.findall(typed) == []
    assert cards.readme_sections(readme) == readme  # the tables, baselines too, are what the records give
