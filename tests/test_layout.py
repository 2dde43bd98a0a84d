"""The shape of tools/: every pipeline of the registry has its package with the same step names, no module under
tools/ reaches another module's main() or imports a step script (scripts import only libraries), and the former module
names map onto modules that exist."""

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


def test_the_former_module_names_map_onto_modules_that_exist():
    for module, former in registry.FORMER_NAMES.items():
        assert (ROOT / "tools" / f"{module.replace('.', '/')}.py").is_file(), module
        assert not (ROOT / "tools" / f"{former}.py").exists(), f"tools/{former}.py is back beside {module}"
        assert registry.module_of_record(former) == module
    assert registry.module_of_record("captionbert.export") == "captionbert.export"
