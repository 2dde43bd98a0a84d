"""The shape of tools/: every pipeline of the registry has its package with the same step names, no module under
tools/ reaches another module's main() or imports a step script (scripts import only libraries), statically or by a
name computed at run time."""

import ast

import pytest

from helpers import ROOT
from tools import demo, registry

TOOLS = sorted(path for path in (ROOT / "tools").rglob("*.py") if path.name != "__init__.py")


def module_name(path):
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def is_module(dotted):
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported_tools_modules(tree):
    """{local name: module} of every tools module a file imports as a module (import / from-import / as)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tools":
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                if is_module(candidate):
                    names[alias.asname or alias.name] = candidate
                elif alias.name == "main":
                    names["main"] = node.module  # from tools.x import main
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tools":
                    names[alias.asname or alias.name] = alias.name
    return names


def other_mains(tree):
    """The other tools modules' main() a file imports or names: ["tools.x.main", ...]."""
    modules = imported_tools_modules(tree)
    found = [f"{modules['main']}.main"] if "main" in modules else []
    return found + [f"{modules[node.value.id]}.main" for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                    and node.attr == "main" and isinstance(node.value, ast.Name) and node.value.id in modules]


@pytest.mark.parametrize("path", TOOLS, ids=module_name)
def test_no_module_reaches_another_module_s_main(path):
    assert other_mains(ast.parse(path.read_text())) == []


def test_the_check_sees_another_tool_s_main_however_it_is_imported():
    tree = ast.parse("from tools import cards\nfrom tools.glyph import train as glyph_train\n"
                     "from tools.demo import main\nimport tools.vendor\ncards.main([])\nglyph_train.main([])\n")
    assert other_mains(tree) == ["tools.demo.main", "tools.cards.main", "tools.glyph.train.main"]


STEP_SCRIPTS = {f"tools.{step.tool}" for budget in demo.BUDGETS.values() for step in demo.demo_steps("data", budget)}


def imported_from(tree):
    """Every tools module a file imports anything from (the module itself, or the module a name comes from)."""
    modules = set(imported_tools_modules(tree).values())
    return modules | {node.module for node in ast.walk(tree)
                      if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tools.")}


@pytest.mark.parametrize("path", TOOLS, ids=module_name)
def test_no_module_imports_a_step_script(path):
    """A module the demo runs as a step (python -m tools.<step>) is a script: what others need of it lives in a
    library beside it (data, metrics, ...)."""
    assert imported_from(ast.parse(path.read_text())) & (STEP_SCRIPTS - {module_name(path)}) == set()


def dynamic_imports(tree):
    """The calls that import a module by a name computed at run time: importlib.import_module(...), __import__(...)."""
    return [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module", "__import__")]


def test_the_only_dynamic_import_is_of_each_pipeline_s_card_library():
    """Static imports are checked above; the one import by computed name, tools/cards.py's of each pipeline's card
    library (registry.Pipeline.card), names a library beside the card's template, never a step script."""
    calls = {module_name(path): dynamic_imports(ast.parse(path.read_text())) for path in TOOLS}
    assert {module: found for module, found in calls.items() if found} == {
        "tools.cards": ["importlib.import_module(pipeline.card)"]}
    for pipeline in registry.PIPELINES:
        assert is_module(pipeline.card) and pipeline.card not in STEP_SCRIPTS
        assert (ROOT / "tools" / pipeline.name / "card.md").is_file()
        assert "def main" not in (ROOT / "tools" / pipeline.name / "card.py").read_text()


def test_the_dynamic_import_check_sees_each_form():
    tree = ast.parse("import importlib\nfrom importlib import import_module\nimportlib.import_module('tools.x')\n"
                     "import_module(name)\n__import__('tools.y')\n")
    assert dynamic_imports(tree) == ["importlib.import_module('tools.x')", "import_module(name)",
                                     "__import__('tools.y')"]


def test_the_step_script_check_sees_every_form_of_import():
    tree = ast.parse("from tools.captionbert import train as t\nfrom tools.glyph.train import embed\n"
                     "import tools.geolip.train\nfrom tools.captionbert.data import Config\n")
    assert imported_from(tree) & STEP_SCRIPTS == {"tools.captionbert.train", "tools.glyph.train", "tools.geolip.train"}


def test_every_pipeline_has_its_package_with_the_common_steps():
    for pipeline in registry.PIPELINES:
        package = ROOT / "tools" / pipeline.name
        assert (package / "__init__.py").is_file()
        for step in ("data", "train", "evaluate", "export"):
            assert (package / f"{step}.py").is_file(), f"tools/{pipeline.name}/{step}.py"
        assert pipeline.path.is_dir() and (pipeline.path / "config.json").is_file()
