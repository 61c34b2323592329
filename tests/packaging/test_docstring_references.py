"""Every Sphinx-style reference in a docstring of the three packages names something that exists.

``:mod:`x``` names a module file (``.x`` is a sibling of the module holding the docstring, ``..x`` a sibling
of its package, as in a relative import; a leading ``~`` only shortens the display). ``:func:``,
``:class:``, ``:data:``, ``:attr:`` and ``:meth:`` name an attribute: of the module their dotted prefix
names, or, undotted, of the module (or the class) holding the docstring. Read from the source with
``ast``, so neither verl nor TRL is imported: a module's attributes are its top-level definitions,
assignments and imports (followed to our own modules), the names of its ``__all__``, its submodules,
and a class's are its body's names, the ``self.x`` its methods set, and its bases' (a base outside
the three packages lets any name through).
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"rllm_plugins": ROOT / "rllm_plugins", "rllm_verl": ROOT / "adapters" / "rllm_verl", "rllm_trl": ROOT / "adapters" / "rllm_trl"}
FRAMEWORKS = {"verl", "trl", "torch", "transformers", "ray", "numpy"}  # named in docstrings, installed or not
ROLES = ("mod", "func", "class", "data", "attr", "meth")
REFERENCE = re.compile(r":(?P<role>" + "|".join(ROLES) + r"):`(?:[^`<]*<)?(?P<target>[^`>]+)>?`")


def module_name(package: str, path: Path) -> str:
    parts = [package, *path.relative_to(PACKAGES[package]).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {module_name(package, path): path for package, folder in PACKAGES.items() for path in sorted(folder.rglob("*.py"))}


def ours(dotted: str) -> bool:
    return dotted.split(".", 1)[0] in PACKAGES


def package_of(module: str) -> str:
    """The package a relative name in ``module`` starts from: the module itself for an ``__init__.py``."""
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def absolute(target: str, module: str) -> str:
    """``target`` as an absolute dotted name: ``.x`` in ``a.b.c`` is ``a.b.x``, ``..x`` is ``a.x``."""
    dots = len(target) - len(target.lstrip("."))
    if not dots:
        return target
    base = package_of(module)
    for _ in range(dots - 1):
        base = base.rpartition(".")[0]
    rest = target[dots:]
    return f"{base}.{rest}" if rest else base


@dataclass(frozen=True)
class Reference:
    path: Path
    line: int
    module: str
    scope: tuple[str, ...]  # the classes enclosing the docstring, outermost first
    role: str
    text: str  # as written, ``~`` included

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: :{self.role}:`{self.text}`"


@functools.cache
def tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))


def references(module: str) -> list[Reference]:
    """The references in the module's, its classes' and its functions' docstrings, with their lines."""
    found = []
    source = MODULES[module].read_text()

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        if isinstance(node, ast.ClassDef):  # a class's docstring speaks from inside the class
            scope = (*scope, node.name)
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                raw = ast.get_source_segment(source, first.value) or ""
                for match in REFERENCE.finditer(raw):
                    line = first.value.lineno + raw.count("\n", 0, match.start())
                    found.append(Reference(MODULES[module], line, module, scope, match["role"], match["target"].strip()))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree(module), ())
    return found


def top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of ``body``, those inside ``if``/``try``/``with`` blocks included (``if TYPE_CHECKING:`` imports)."""
    out = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If):
            out += top_level(node.body) + top_level(node.orelse)
        elif isinstance(node, ast.Try):
            out += top_level(node.body) + top_level(node.orelse) + top_level(node.finalbody)
            for handler in node.handlers:
                out += top_level(handler.body)
        elif isinstance(node, ast.With):
            out += top_level(node.body)
    return out


def target_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in target_names(element)]
    if isinstance(target, ast.Starred):
        return target_names(target.value)
    return []


def string_names(node: ast.expr | None, assigned: dict[str, ast.expr]) -> list[str]:
    """The names an ``__all__`` value lists: a list or tuple of strings, or ``sorted(X)``/``list(X)`` of a dict named ``X``."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if isinstance(node, ast.Dict):
        return [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    if isinstance(node, ast.Call) and len(node.args) == 1:
        argument = node.args[0]
        if isinstance(argument, ast.Name) and argument.id in assigned:
            return string_names(assigned[argument.id], assigned)
        return string_names(argument, assigned)
    if isinstance(node, ast.BinOp):
        return string_names(node.left, assigned) + string_names(node.right, assigned)
    return []


def import_source(node: ast.ImportFrom, module: str) -> str:
    if not node.level:
        return node.module or ""
    return absolute("." * node.level + (node.module or ""), module)


@functools.cache
def names_of(module: str) -> dict[str, tuple]:
    """The module's attributes: name -> ``("node", node)``, ``("module", dotted)``, ``("import", module, name)``,
    ``("all", module, name)`` (listed in ``__all__``) or ``("any",)`` (imported from outside the three packages)."""
    names: dict[str, tuple] = {}
    assigned: dict[str, ast.expr] = {}
    for node in top_level(tree(module).body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = ("node", node)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in target_names(target):
                    names[name] = ("node", node)
                    assigned[name] = node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            for name in target_names(node.target):
                names.setdefault(name, ("node", node))
                if getattr(node, "value", None) is not None:
                    assigned[name] = node.value
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = ("module", alias.name) if ours(alias.name) else ("any",)
                else:
                    top = alias.name.split(".", 1)[0]
                    names[top] = ("module", top) if ours(top) else ("any",)
        elif isinstance(node, ast.ImportFrom):
            source = import_source(node, module)
            for alias in node.names:
                if alias.name == "*":
                    continue
                name = alias.asname or alias.name
                if not ours(source):
                    names[name] = ("any",)
                elif f"{source}.{alias.name}" in MODULES:
                    names[name] = ("module", f"{source}.{alias.name}")
                else:
                    names[name] = ("import", source, alias.name)
    for name in string_names(assigned.get("__all__"), assigned):
        names.setdefault(name, ("all", module, name))
    prefix = f"{module}."
    if MODULES[module].name == "__init__.py":
        for other in MODULES:
            if other.startswith(prefix) and "." not in other[len(prefix) :]:
                names.setdefault(other[len(prefix) :], ("module", other))
    return names


def follow(binding: tuple, seen: frozenset = frozenset()) -> tuple | None:
    """An imported name followed to where it is defined; ``None`` when it is not there."""
    while binding[0] in ("import", "all"):
        _, module, name = binding
        if (module, name) in seen or module not in MODULES:
            return None
        seen |= {(module, name)}
        found = names_of(module).get(name)
        if found is None and binding[0] == "all" and "__getattr__" in names_of(module):
            return ("any",)  # a lazy export whose table the reader cannot follow
        if found is None:
            return None
        binding = found
    return binding


def class_members(module: str, node: ast.ClassDef) -> dict[str, tuple] | None:
    """A class's attributes (its bases' included); ``None`` when a base comes from outside the three packages."""
    members: dict[str, tuple] = {}
    for base in node.bases:
        inherited = members_of(lookup(module, base))
        if inherited is None:
            return None
        members = {**inherited, **members}
    for statement in top_level(node.body):
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            members[statement.name] = ("node", statement, module)
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(statement):
                    targets = inner.targets if isinstance(inner, ast.Assign) else [getattr(inner, "target", None)]
                    for target in targets:
                        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                            members.setdefault(target.attr, ("node", inner, module))
        elif isinstance(statement, ast.Assign):
            for target in statement.targets:
                for name in target_names(target):
                    members[name] = ("node", statement, module)
        elif isinstance(statement, ast.AnnAssign):
            for name in target_names(statement.target):
                members[name] = ("node", statement, module)
    return members


def lookup(module: str, expression: ast.expr) -> tuple | None:
    """What a base class expression names, seen from ``module``."""
    if isinstance(expression, ast.Subscript):  # Generic[T], NamedTuple-like parametrised bases
        return lookup(module, expression.value)
    dotted = ast.unparse(expression)
    first, *rest = dotted.split(".")
    binding = names_of(module).get(first)
    if binding is None:
        return ("any",) if hasattr(builtins, first) else None
    return walk(binding, rest, module)


def members_of(binding: tuple | None) -> dict[str, tuple] | None:
    if binding is None or binding[0] == "any":
        return None
    if binding[0] == "module":
        return {name: (*found, binding[1]) if found[0] == "node" else found for name, found in names_of(binding[1]).items()}
    node, module = binding[1], binding[2]
    if isinstance(node, ast.ClassDef):
        return class_members(module, node)
    return None  # an attribute of a function's result or an assigned value: not checked


def walk(binding: tuple, rest: list[str], module: str) -> tuple | None:
    """Follow ``rest`` attribute by attribute from ``binding``; ``("any",)`` once outside what the source shows."""
    binding = follow(binding)
    if binding is None:
        return None
    if binding[0] == "node" and len(binding) == 2:
        binding = (*binding, module)
    for name in rest:
        if binding[0] == "any":
            return binding
        if binding[0] == "node" and not isinstance(binding[1], ast.ClassDef):
            return ("any",)  # an attribute of an assigned value: not checked
        members = members_of(binding)
        if members is None:
            return ("any",)
        found = members.get(name)
        if found is None:
            return None
        owner = binding[1] if binding[0] == "module" else binding[2]
        binding = follow(found)
        if binding is None:
            return None
        if binding[0] == "node" and len(binding) == 2:
            binding = (*binding, owner)
    return binding


def resolves(reference: Reference) -> bool:
    """Whether the reference names an existing module (``:mod:``) or attribute (the other roles)."""
    target = absolute(reference.text.lstrip("~"), reference.module)
    if reference.role == "mod":
        return target in MODULES if ours(target) else True
    parts = target.split(".")
    if ours(target):
        cut = max((i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in MODULES), default=0)
        if not cut:
            return False
        if cut == len(parts):
            return False  # a module named by :func: / :class: ...: the role says an attribute
        return walk(("module", ".".join(parts[:cut])), parts[cut:], reference.module) is not None
    # undotted, or dotted from a name of the module holding the docstring: the enclosing classes first
    scopes: list[dict[str, tuple] | None] = []
    node: ast.AST = tree(reference.module)
    for name in reference.scope:
        node = next(n for n in top_level(node.body) if isinstance(n, ast.ClassDef) and n.name == name)
        scopes.append(class_members(reference.module, node))
    for members in reversed(scopes):
        if members is not None and parts[0] in members:
            return walk(members[parts[0]], parts[1:], reference.module) is not None
    binding = names_of(reference.module).get(parts[0])
    if binding is not None:
        return walk(binding, parts[1:], reference.module) is not None
    if None in scopes:
        return True  # a class with a base outside the three packages: the name may be inherited
    if len(parts) > 1:  # ``torch.Tensor``: a name outside the three packages, not checked past its package
        return parts[0] in FRAMEWORKS or importlib.util.find_spec(parts[0]) is not None
    return hasattr(builtins, parts[0])


ALL = [reference for module in MODULES for reference in references(module)]


def test_the_reader_finds_and_resolves_references():
    assert absolute(".batch", "rllm_plugins.steps") == "rllm_plugins.steps.batch"
    assert absolute(".turns", "rllm_plugins.steps.batch") == "rllm_plugins.steps.turns"
    assert absolute("..needs", "rllm_plugins.steps.batch") == "rllm_plugins.needs"
    assert absolute("rllm_plugins.steps", "rllm_verl.groups") == "rllm_plugins.steps"
    match = REFERENCE.search("see :func:`the turns <~rllm_plugins.steps.turns.turn_anchor_codes>`")
    assert match and (match["role"], match["target"]) == ("func", "~rllm_plugins.steps.turns.turn_anchor_codes")
    batch = MODULES["rllm_plugins.steps.batch"]

    def ref(role: str, text: str, module: str = "rllm_plugins.steps.batch", scope: tuple[str, ...] = ()) -> bool:
        return resolves(Reference(batch, 1, module, scope, role, text))

    assert ref("mod", ".turns") and ref("mod", "rllm_plugins.steps") and ref("mod", "~rllm_verl.patches.v1")
    assert not ref("mod", ".step_bridge") and not ref("mod", "rllm_plugins.anchors") and not ref("mod", "rllm_verl.step_bridge")
    assert ref("class", "~rllm_plugins.steps.StepBatch") and ref("class", "StepBatch") and ref("func", "rllm_plugins.steps.turns.turn_anchor_codes")
    assert not ref("func", "rllm_plugins.anchors.anchor_ids") and not ref("func", "rllm_plugins.steps.anchor_ids")
    assert ref("func", "rllm_plugins.steps.anchors.anchor_ids") and ref("func", ".anchors.anchor_ids")
    assert ref("meth", "StepBatch.num_steps") and not ref("meth", "StepBatch.no_such_method")
    assert ref("meth", "from_offsets", "rllm_plugins.segments", ("GroupLayout",)) and not ref("meth", "from_offsets", "rllm_plugins.segments")
    assert ref("class", "torch.Tensor") and ref("class", "dict") and not ref("func", "no_such_function")
    assert not ref("func", "step_forms.anchor_id_lists")
    assert ALL and {r.role for r in ALL} == set(ROLES)


def test_every_docstring_reference_resolves():
    dangling = [str(reference) for reference in ALL if not resolves(reference)]
    assert not dangling, f"{len(dangling)} docstring references name nothing that exists:\n" + "\n".join(dangling)
