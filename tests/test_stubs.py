"""The type stubs shipped for the Rust extension (``tokenmill/_core.pyi``) describe the
extension as built: the same functions, classes, methods and properties, each with the
parameters the compiled code takes (names, order, which have defaults). Type checkers and
editors read only the stubs, so a method added, renamed or given another parameter in Rust
without its stub would go unseen by them."""

import ast
import inspect
import pathlib

import pytest

import tokenmill
from tokenmill import _core

STUB = pathlib.Path(tokenmill.__file__).with_name("_core.pyi")


def _params(args: ast.arguments) -> list[tuple[str, bool]]:
    """A stub function's parameters as (name, has a default), ``self`` left out."""
    positional = args.posonlyargs + args.args
    firsts = len(positional) - len(args.defaults)
    out = [(a.arg, i >= firsts) for i, a in enumerate(positional)]
    out += [(a.arg, d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return [p for p in out if p[0] != "self"]


def _runtime_params(obj) -> list[tuple[str, bool]]:
    """The compiled callable's parameters, from the signature PyO3 records."""
    sig = inspect.signature(obj)
    return [(p.name, p.default is not inspect.Parameter.empty) for p in sig.parameters.values() if p.name != "self"]


def _stub():
    """{name: ("function", params) | ("class", {member: ("method", params) | ("property",)})
    | ("attribute",)} read from the stub file."""
    tree = ast.parse(STUB.read_text(encoding="utf-8"))
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = ("function", _params(node.args))
        elif isinstance(node, ast.ClassDef):
            members = {}
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    decorators = {d.id for d in item.decorator_list if isinstance(d, ast.Name)}
                    members[item.name] = ("property",) if "property" in decorators else ("method", _params(item.args))
            out[node.name] = ("class", members)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if not node.target.id.startswith("_") or node.target.id.startswith("__"):
                out[node.target.id] = ("attribute",)
    return out


def _runtime_members(cls) -> dict:
    members = {}
    for name, value in vars(cls).items():
        if name.startswith("__"):
            continue
        if inspect.isdatadescriptor(value):
            members[name] = ("property",)
        elif callable(value):
            members[name] = ("method", _runtime_params(getattr(cls, name)))
    return members


def test_the_stub_file_ships_beside_the_extension():
    assert STUB.is_file(), f"{STUB} is missing: type checkers would see no types for tokenmill._core"


def test_the_stub_names_what_the_extension_has_and_nothing_else():
    stub = _stub()
    runtime = {n for n in dir(_core) if not n.startswith("_")} | {"__version__"}
    assert set(stub) == runtime, (
        f"in the extension but not the stub: {sorted(runtime - set(stub))}; "
        f"in the stub but not the extension: {sorted(set(stub) - runtime)}"
    )


@pytest.mark.parametrize("name", sorted(n for n, kind in _stub().items() if kind[0] == "function"))
def test_each_function_takes_the_parameters_its_stub_gives(name):
    assert _stub()[name][1] == _runtime_params(getattr(_core, name)), name


@pytest.mark.parametrize("name", sorted(n for n, kind in _stub().items() if kind[0] == "class"))
def test_each_class_has_the_members_and_parameters_its_stub_gives(name):
    cls = getattr(_core, name)
    stub_members = dict(_stub()[name][1])
    init = stub_members.pop("__init__", None)
    assert init is not None, f"{name}: the stub gives no __init__"
    assert init[1] == _runtime_params(cls), f"{name}(...)"
    runtime = _runtime_members(cls)
    assert set(stub_members) == set(runtime), (
        f"{name}: in the extension but not the stub: {sorted(set(runtime) - set(stub_members))}; "
        f"in the stub but not the extension: {sorted(set(stub_members) - set(runtime))}"
    )
    for member, kind in stub_members.items():
        assert kind == runtime[member], f"{name}.{member}"
