"""README.md's Tools section: every module under tools/ is listed once, the tools (modules with a main(), which
`python -m tools.<pipeline>.<step>` runs) in the tool table and the libraries (no main(): `python -m` prints nothing)
in the library table."""

import ast
import re

from helpers import ROOT


def has_main(path):
    """Whether a module defines main() at its top level."""
    return any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in ast.parse(path.read_text()).body)


def test_the_tool_table_lists_the_tools_and_the_library_table_the_libraries():
    section = (ROOT / "README.md").read_text().split("\n## Tools\n")[1].split("\n## ")[0]
    tables, header = {}, None
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| `"):
            header = line.split("|")[1].strip()
        elif line.startswith("| `tools/"):
            tables.setdefault(header, []).append(re.match(r"\| `(tools/[^`]+)`", line)[1].rstrip("/"))
    modules = {path.relative_to(ROOT).as_posix(): has_main(path) for path in (ROOT / "tools").rglob("*.py")
               if path.name != "__init__.py"}
    assert sorted(tables) == ["library", "tool"]
    assert sorted(tables["tool"]) == sorted(name for name, tool in modules.items() if tool)
    assert sorted(tables["library"]) == sorted(name for name, tool in modules.items() if not tool)
