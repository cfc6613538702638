"""The package layout holds: imports point down the stages, no stage has an import cycle inside it, a function-level
import only defers a heavy dependency, and the component registry is the one place that lists components. An AST
scan of every module (imports inside functions count too). Unit tier, no imports run: well under a second."""

import argparse
import ast
import json
import re
from pathlib import Path

import pytest

from kokoro_tvm.components import NAMES

PACKAGE = Path(__file__).resolve().parents[1] / "kokoro_tvm"
NOTEBOOKS = PACKAGE.parent / "notebooks"
BASE = {
    "config",
    "paths",
    "components",
    "artifacts",
    "errors",
    "machine",
    "marks",
    "timing",
    "_packages",
    "__init__",
}  # below every stage


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at any depth of the file (absolute names)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import"
            found.add(node.module)
            # `from kokoro_tvm.x import y` may import the submodule kokoro_tvm.x.y
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {
    name: {m for m in _imports(path) if m in MODULES or not m.startswith("kokoro_tvm")}
    for name, path in MODULES.items()
}


def _stage(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    return "base" if parts[1] in BASE else parts[1]


def _closure(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for dep in GRAPH.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                if dep in GRAPH:
                    todo.append(dep)
    return seen


def _of(stage: str) -> list[str]:
    return sorted(m for m in MODULES if _stage(m) == stage)


# The stages, bottom up (NOTES/architecture.md); a stage imports only stages below it, and not every one of them:
# stage -> the stages it may never import (directly or through another module).
ABOVE_TEXT = {
    "compiler",
    "runtime",
    "compiled",
    "peers",
    "evaluation",
    "synthesis",
    "studies",
    "report",
    "scale",
    "commands",
    "cli",
}
FORBIDDEN = {
    "base": {"frontend", "weights", "reference"} | ABOVE_TEXT,
    "frontend": ABOVE_TEXT,
    "weights": ABOVE_TEXT,
    "reference": ABOVE_TEXT,
    "compiler": ABOVE_TEXT - {"compiler"},
    "runtime": ABOVE_TEXT - {"runtime"},  # the runtime runs without the compiler (and without torch)
    "compiled": ABOVE_TEXT - {"compiler", "runtime", "compiled"},
    "peers": {"evaluation", "synthesis", "studies", "report", "scale", "commands", "cli"},  # what bench runs against
    "evaluation": {"synthesis", "studies", "report", "scale", "commands", "cli"},
    "synthesis": {"studies", "report", "scale", "commands", "cli"},
    "studies": {"report", "scale", "commands", "cli"},  # the experiments the notebooks tell
    "report": {"studies", "scale", "commands", "cli"},
    "scale": {"studies", "report", "commands", "cli"},  # the Dask cluster the commands run on
    "commands": {"studies", "cli"},  # what users run: one module per command, no study
    "cli": {"studies"},  # parses, then calls the command's module
}


def test_every_module_has_a_stage():
    stages = {_stage(m) for m in MODULES}
    assert stages <= set(FORBIDDEN) | {"package"}, stages - set(FORBIDDEN)
    assert len(MODULES) > 30  # the scan found the package


@pytest.mark.parametrize("stage", sorted(FORBIDDEN))
def test_imports_point_down_the_stages(stage):
    wrong = [
        f"{module} -> {dep}"
        for module in _of(stage)
        for dep in sorted(_closure(module))
        if dep in MODULES and _stage(dep) in FORBIDDEN[stage]
    ]
    assert not wrong, wrong


def _cycle_edges(stage: str) -> list[str]:
    """Every import edge `a -> b` inside `stage` that lies on a cycle (b reaches a back within the stage)."""
    members = set(_of(stage))

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for dep in GRAPH.get(todo.pop(), ()):
                if dep in members and dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    reaches = {module: reach(module) for module in members}
    return [f"{a} -> {b}" for a in sorted(members) for b in sorted(GRAPH[a] & members) if b != a and a in reaches[b]]


@pytest.mark.parametrize("stage", sorted(FORBIDDEN))
def test_no_import_cycle_inside_a_stage(stage):
    """Two modules of one stage never import each other in a circle, directly or through others of the stage, at
    any depth of the file: a function-level import that hides a cycle is still a cycle."""
    assert not _cycle_edges(stage), _cycle_edges(stage)


def test_the_cycle_check_finds_a_cycle(monkeypatch):
    """The check above is not vacuous: a cycle put into the graph is reported with its file pair."""
    a, b = "kokoro_tvm.compiler.sizes", "kokoro_tvm.compiler.targets"
    monkeypatch.setitem(GRAPH, a, GRAPH[a] | {b})
    monkeypatch.setitem(GRAPH, b, GRAPH[b] | {a})
    assert f"{a} -> {b}" in _cycle_edges("compiler") and f"{b} -> {a}" in _cycle_edges("compiler")


# What a function-level import may defer: a dependency that costs seconds or hundreds of MB to import, or that an
# install may lack (Whisper's runtime, the ONNX tools, the notebook and browser stacks). Everything else, numpy
# and the package's own light modules included, is imported at the top of the file.
HEAVY = frozenset(
    {
        "torch",
        "tvm",
        "tvm_ffi",
        "kokoro",
        "misaki",
        "spacy",
        "espeakng_loader",
        "phonemizer",
        "onnx",
        "onnxruntime",
        "faster_whisper",
        "ctranslate2",
        "pocketsphinx",
        "jiwer",
        "pesq",
        "pystoi",
        "scipy",
        "matplotlib",
        "papermill",
        "nbformat",
        "nbclient",
        "jupyter_client",
        "jupyterlab",
        "jupyter_server",
        "selenium",
        "huggingface_hub",
        "openvino",
        "dask",
        "distributed",
        "pyarrow",
        "tqdm",
    }
)


def _top_and_deferred(path: Path) -> tuple[set[str], list[tuple[int, list[str]]]]:
    """(modules imported at the top level of the file, [(line, modules) of each import inside a function])."""
    tree = ast.parse(path.read_text())
    inside = {
        id(node)
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(func)
        if isinstance(node, ast.Import | ast.ImportFrom)
    }
    top, deferred = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        names = [n for n in names if n in MODULES or not n.startswith("kokoro_tvm")]
        if id(node) in inside:
            deferred.append((node.lineno, names))
        else:
            top.update(names)
    return top, deferred


TOP = {name: _top_and_deferred(path)[0] for name, path in MODULES.items()}


def _heavy_at_import(names) -> set[str]:
    """The HEAVY packages that importing `names` loads, through the package's top-level imports."""
    heavy, seen, todo = set(), set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in MODULES:
            todo.extend(TOP[name])
        elif name.split(".")[0] in HEAVY:
            heavy.add(name.split(".")[0])
    return heavy


def _needless_deferred_imports() -> list[str]:
    wrong = []
    for name, path in MODULES.items():
        loaded = _heavy_at_import([name])
        source = path.read_text().splitlines()
        for line, names in _top_and_deferred(path)[1]:
            if "(deferred: " in source[line - 1]:  # a stated reason other than weight (an import-time context)
                continue
            if not _heavy_at_import(names) - loaded:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} {names[0]}")
    return wrong


def test_function_level_imports_only_defer_heavy_dependencies():
    """An import inside a function is there to keep a HEAVY package out of the module's import (the CLI starts in
    a fraction of a second, the runtime loads without torch), or says on its line why it is deferred
    (`(deferred: ...)`); one that defers nothing new belongs at the top."""
    assert not _needless_deferred_imports(), _needless_deferred_imports()


def test_the_deferred_import_check_knows_heavy_from_light():
    assert _heavy_at_import(["json", "numpy", "kokoro_tvm.config"]) == set()
    assert "torch" in _heavy_at_import(["kokoro_tvm.reference.pt_dynamic"])
    assert "tvm" in _heavy_at_import(["kokoro_tvm.compiler.sizes"])


def test_runtime_never_reaches_torch_or_kokoro():
    """The runtime runs on a machine with only TVM's runtime and numpy: nothing it imports may need torch."""
    wrong = [
        f"{module} -> {dep}"
        for module in _of("runtime")
        for dep in sorted(_closure(module))
        if dep.split(".")[0] in ("torch", "kokoro", "misaki")
    ]
    assert not wrong, wrong


def _literal_name_lists(tree: ast.AST) -> list[tuple[int, list[str]]]:
    """(line, names) of every tuple/list/set literal of two or more component names and nothing else."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            names = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in NAMES]
            if len(names) >= 2 and len(names) == len(node.elts):
                found.append((node.lineno, names))
    return found


def test_the_registry_is_the_only_list_of_components():
    """Component names appear elsewhere only one at a time (calls, prose), never as a list of several: which
    components exist and which axis each runs on is written once, in kokoro_tvm/components.py."""
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line} {names}"
        for name, path in MODULES.items()
        if name != "kokoro_tvm.components"
        for line, names in _literal_name_lists(ast.parse(path.read_text()))
    ]
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
        for index, cell in enumerate(json.loads(notebook.read_text())["cells"]):
            if cell["cell_type"] == "code":
                source = "".join(cell["source"])
                tree = ast.parse(re.sub(r"^[!%].*$", "", source, flags=re.M))
                wrong += [f"{notebook.name} cell {index}:{line} {names}" for line, names in _literal_name_lists(tree)]
    assert not wrong, wrong


def test_no_module_is_named_after_a_builtin():
    import builtins

    clashes = [name for name in MODULES if name.split(".")[-1] in dir(builtins)]
    assert not clashes, clashes


def _calls(path: Path, names: tuple[str, ...]) -> list[str]:
    """`a.b.c(...)` calls in `path` whose dotted name ends with one of `names`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            dotted = ast.unparse(node.func)
            if dotted.endswith(names):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {dotted}")
    return found


def test_tvm_builds_stay_in_the_compiler_and_vm_calls_in_the_runtime():
    """An API rename in TVM is then a one-place fix: build calls in compiler/, the Relax VM in runtime/."""
    builds = [
        c
        for name, p in MODULES.items()
        if _stage(name) != "compiler"
        for c in _calls(p, ("tvm.compile", "tirx.build", ".export_library"))
    ]
    vms = [c for name, p in MODULES.items() if _stage(name) != "runtime" for c in _calls(p, ("VirtualMachine",))]
    assert not builds and not vms, builds + vms


MAX_MODULE_LINES = 350  # a module a newcomer reads in one sitting
MAX_FUNCTION_LINES = 60  # a function that fits a screen; longer ones are split into named steps
# Justified exceptions (NOTES/architecture.md): a TVMScript kernel reads as one body, top to bottom.
LONG_FUNCTIONS = {"compiler/ops/lstm_gpu.py:gpu_recurrence_kernel"}


def test_modules_and_functions_stay_small():
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        name = path.relative_to(PACKAGE).as_posix()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            size = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and size > MAX_FUNCTION_LINES:
                if f"{name}:{node.name}" not in LONG_FUNCTIONS:
                    too_long.append(f"{name}:{node.name}: {size} lines")
    assert too_long == []


# The pipeline wraps its phases in one module pass of its own (`KokoroPipeline`): the pipeline, not a pass of it.
PIPELINE = "compiler/pipeline.py:_pipeline"


def _passes_defined(path: Path) -> list[str]:
    """Every IR pass `path` defines: a function decorated as a TVM pass (module, function or PrimFunc pass), an
    expression mutator class, or a pass made by the rewrite helpers of compiler/passes/base.py."""
    found, name = [], path.relative_to(PACKAGE).as_posix()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            for decorator in node.decorator_list:
                called = ast.unparse(decorator.func if isinstance(decorator, ast.Call) else decorator)
                if called.endswith(("module_pass", "function_pass", "prim_func_pass")) or called == "mutator":
                    found.append(f"{name}:{node.name}")
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("rewriting_pass"):
            found.append(f"{name}:{node.lineno} {ast.unparse(node.func)}")
    return found


def test_every_pass_lives_in_compiler_passes():
    """One room for the IR passes: the pipeline reads them from compiler/passes/ and nowhere else."""
    outside = [
        found
        for path in sorted(PACKAGE.rglob("*.py"))
        if not path.relative_to(PACKAGE).as_posix().startswith("compiler/passes/")
        for found in _passes_defined(path)
        if found != PIPELINE
    ]
    assert outside == []
    # the check is not vacuous: it finds the passes where they live (20 of them at this writing)
    inside = [
        found for path in sorted((PACKAGE / "compiler" / "passes").glob("*.py")) for found in _passes_defined(path)
    ]
    assert len(inside) >= 15, inside


def test_nothing_but_the_notebooks_and_the_studies_imports_a_study():
    """The studies are the experiments behind the notebooks: no product code leans on one (directly or through
    another module), so a study can change with its notebook's story."""
    wrong = [
        f"{module} -> {dep}"
        for module in MODULES
        if _stage(module) != "studies"
        for dep in sorted(_closure(module))
        if dep in MODULES and _stage(dep) == "studies"
    ]
    assert wrong == []
    assert len(_of("studies")) >= 10  # the check reads the studies it guards


def _subcommands() -> dict[str, object]:
    from kokoro_tvm.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: p.get_default("func") for name, p in sub.choices.items()}


def test_every_command_is_one_module_of_the_commands_package():
    """What users run lives in one room: each `kokoro-tvm` subcommand calls `run(args)` of its own module of
    kokoro_tvm.commands (the CLI only parses), named after it (`compile`: compile_builds, not a builtin's name)."""
    import importlib

    commands = _subcommands()
    assert len(commands) >= 12, sorted(commands)
    modules = {name: getattr(func, "command_module", None) for name, func in commands.items()}
    expected = {name: f"kokoro_tvm.commands.{name.replace('-', '_')}" for name in commands}
    expected["compile"] = "kokoro_tvm.commands.compile_builds"
    assert modules == expected
    assert all(callable(getattr(importlib.import_module(m), "run", None)) for m in modules.values())
    # and nothing outside the package defines a command: the CLI modules hold parsers only
    defined = [
        f"{name}:{node.name}"
        for name, path in MODULES.items()
        if _stage(name) == "cli"
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.args.args and node.args.args[0].arg == "args"
    ]
    assert defined == []
