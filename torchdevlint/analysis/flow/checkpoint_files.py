"""Which checkpoint files a program writes before it reads them back, in one run.

`torch.load` restores tensors on the device that saved them. When the same run of the same
program (or notebook session) saved the file earlier, that device is present: the load cannot
fail for want of it. This module answers "was the file this load reads written earlier in
this run?" from the syntax alone:

- A file is named by a *path key*: its path expression with each name replaced by what it
  was bound to (`PATH = "./net.pth"`, `path = os.path.join(args.out, "best.pt")`, a file
  handle `with open(p, "wb") as f`), and parameters by the arguments of the call being
  followed. A name bound more than once, a loop variable or an unfollowed parameter names
  no file: such loads and saves are never paired.
- A save runs before a load when it comes earlier in the same body and not in a branch that
  excludes the load (`if train: save … else: load`); or when an earlier call in that body
  runs a same-file function that saves (at most three calls deep); or when the load is in a
  function every same-file call of which comes after such a save.
- A load of a file a glob lists (`sorted(glob.glob(os.path.join("ckpt", "*.pt")))[-1]`)
  reads one the program wrote where an earlier save's path matches the glob
  (`f"ckpt/epoch_{epoch}.pt"`, saved in the loop before it).
- A cache the program builds where it is missing (`if os.path.exists(p): x = torch.load(p)`
  / `else: x = build(); torch.save(x, p)`) is written by whichever machine reads it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.devices import string_value
from torchdevlint.analysis.local_names import function_bindings
from torchdevlint.analysis.names import dotted_name
from torchdevlint.analysis.tree import child_nodes, keyword_argument

# How many same-file calls are followed from a body to a save, or from a load's function to
# its callers.
_CALL_DEPTH = 3
# How many names are followed, one binding into the next, to make a path key.
_NAME_DEPTH = 6

_Scope = cst.Module | cst.FunctionDef
# The model's qualified name of an expression evaluated in a given body (the body is passed:
# the walk reaches code the rules' visitor has not, whose body the model could not yet tell).
_QualifiedName = Callable[[_Scope, cst.BaseExpression], str | None]
# The nodes program order is told between: statements and the parts of compound ones.
_STRUCTURAL = (cst.Module, cst.BaseSuite, cst.SimpleStatementLine, cst.BaseCompoundStatement, cst.BaseSmallStatement,
               cst.Else, cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase)
# Node types that may bind a name (`_record_bindings`), tested before its isinstance chain:
# isinstance on LibCST's ABCs costs more than the rest of the walk.
_BINDING_TYPES = frozenset({cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.WithItem,
                            cst.NamedExpr, cst.Import, cst.ImportFrom, cst.ExceptHandler})
_STRUCTURAL_BY_TYPE: dict[type, bool] = {}


def _is_structural(node_type: type) -> bool:
    structural = _STRUCTURAL_BY_TYPE.get(node_type)
    if structural is None:
        structural = _STRUCTURAL_BY_TYPE[node_type] = issubclass(node_type, _STRUCTURAL)
    return structural


# Whether a function or class of another file (by qualified name), called with these arguments
# ((position or keyword, code), ...), saves a file of the name a path's code names.
_SavedElsewhere = Callable[[str, str, tuple[tuple[str, str], ...]], bool]
# A parameter's argument at the call being followed, and the body that call is in.
_Arguments = dict[str, tuple[cst.BaseExpression, _Scope]]


def saved_path(call: cst.Call) -> cst.BaseExpression | None:
    """The file argument of a `torch.save(obj, f)` call."""
    keyword = keyword_argument(call, "f")
    if keyword is not None:
        return keyword.value
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    return positional[1].value if len(positional) >= 2 else None


def loaded_path(call: cst.Call) -> cst.BaseExpression | None:
    """The file argument of a `torch.load(f)` call."""
    keyword = keyword_argument(call, "f")
    if keyword is not None:
        return keyword.value
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    return positional[0].value if positional else None


@dataclass
class _Body:
    """What one body (a module or a function, without the functions defined in it) holds."""

    # Each name's bindings: the bound expression, or None for a binding that is not a
    # single plain value (a loop target, an augmented assignment, an unpacking, an import).
    bindings: dict[str, list[cst.BaseExpression | None]] = field(default_factory=dict)
    # Where each binding is in program order, for a module-level assignment in no block (a
    # notebook cell's `PATH = ...`); None for any other binding.
    binding_orders: dict[str, list[int | None]] = field(default_factory=dict)
    saves: list[cst.Call] = field(default_factory=list)
    calls: list[cst.Call] = field(default_factory=list)
    # The assignment statement of each plain binding (`model_file = os.path.join(...)`).
    binding_statements: dict[str, list[cst.CSTNode]] = field(default_factory=dict)


class CheckpointFiles:
    """The round trips of one module: built on the first question, from one walk."""

    def __init__(self, module: cst.Module) -> None:
        self._module = module
        self._order: dict[int, int] = {}
        self._parent: dict[int, cst.CSTNode] = {}
        self._scope_of: dict[int, _Scope] = {}
        self._bodies: dict[int, _Body] = {}
        self._functions: dict[str, list[cst.FunctionDef]] = {}
        self._class_of: dict[int, cst.ClassDef] = {}
        self._scope_by_id: dict[int, _Scope] = {}
        self._walked = False

    # ---- the one question --------------------------------------------------------------

    def written_before(self, load: cst.Call, qualified_name: _QualifiedName,
                       saved_elsewhere: _SavedElsewhere | None = None) -> bool:
        """Whether this run of the program saved the file `load` reads before it reads it.
        `qualified_name` is the model's (passed, not kept: a model holding a method of itself
        would be a cycle only the garbage collector frees); `saved_elsewhere` says whether a
        function or class of another file (by qualified name) saves the file a path's code
        names."""
        self._walk(qualified_name)
        path = loaded_path(load)
        scope = self._scope_of.get(id(load))
        if path is None or scope is None:
            return False
        key = self._file_key(load, path, scope, {})
        if key is not None and self._written_before(load, scope, key, _CALL_DEPTH, set()):
            return True
        if key is not None and self._built_where_missing(load, scope, key):
            return True
        if saved_elsewhere is not None and self._saved_by_another_file_before(load, path, scope, qualified_name,
                                                                               saved_elsewhere):
            return True
        if key is not None and not key.startswith(_PARAMETER_KEY):
            return False
        if not isinstance(scope, cst.FunctionDef):
            return False
        # `def load_checkpoint(path): torch.load(path)`: the file each same-file call names,
        # saved before that call (every call, and at least one).
        sites = self._call_sites(scope)
        for site in sites:
            caller = self._scope_of.get(id(site))
            if caller is None:
                return False
            site_key = self._file_key(load, path, scope, self._bind_arguments(scope, site, caller))
            if site_key is None or not self._written_before(site, caller, site_key, _CALL_DEPTH - 1, {id(scope)}):
                return False
        return bool(sites)

    def same_file(self, save: cst.Call, load: cst.Call, qualified_name: _QualifiedName) -> bool:
        """Whether a `torch.save` and a `torch.load` name the same file (each path read in its
        own body: `os.path.join(args.out, "best.pt")` written out in two functions)."""
        self._walk(qualified_name)
        saved, loaded = saved_path(save), loaded_path(load)
        save_scope, load_scope = self._scope_of.get(id(save)), self._scope_of.get(id(load))
        if saved is None or loaded is None or save_scope is None or load_scope is None:
            return False
        key = self._file_key(save, saved, save_scope, {})
        return key is not None and key == self._file_key(load, loaded, load_scope, {})

    def saved_by_the_program(self, load: cst.Call, qualified_name: _QualifiedName) -> bool:
        """Whether some `torch.save` of the file writes the file `load` reads, before or after
        it (a resume: the run loads what an earlier run of it saved)."""
        self._walk(qualified_name)
        loaded, load_scope = loaded_path(load), self._scope_of.get(id(load))
        if loaded is None or load_scope is None:
            return False
        key = self._file_key(load, loaded, load_scope, {})
        if key is None:
            return False
        for body in self._bodies.values():
            for save in body.saves:
                saved, save_scope = saved_path(save), self._scope_of.get(id(save))
                if saved is not None and save_scope is not None and self._file_key(save, saved, save_scope, {}) == key:
                    return True
        return False

    def may_read_what_was_saved(self, save: cst.Call, load: cst.Call, qualified_name: _QualifiedName) -> bool:
        """Whether the file `load` reads may hold what `save` wrote: not where, in one body,
        the save comes after the load with no loop around both (a notebook's later cell), or
        another save of that file always runs between the two."""
        self._walk(qualified_name)
        scope = self._scope_of.get(id(save))
        if scope is None or scope is not self._scope_of.get(id(load)):
            return True
        if self._order[id(save)] > self._order[id(load)] and not self._common_loop(save, load):
            return False
        saved = saved_path(save)
        key = self._file_key(save, saved, scope, {}) if saved is not None else None
        for other in self._bodies[id(scope)].saves:
            other_path = saved_path(other)
            if other is save or other_path is None or not (self._precedes(save, other) and self._precedes(other, load)):
                continue
            same = self._file_key(other, other_path, scope, {}) == key if key is not None else \
                saved is not None and saved.deep_equals(other_path)
            if same and self._runs_whenever(other, load):
                return False
        return True

    def _saved_by_another_file_before(self, load: cst.Call, path: cst.BaseExpression, scope: _Scope,
                                      qualified_name: _QualifiedName,
                                      saved_elsewhere: _SavedElsewhere) -> bool:
        """An earlier call in the load's body runs a function or class of another file of the
        project that saves a file of the name the load reads (`early_stopping(loss, model,
        path)`, an `EarlyStopping` instance whose method saves `path + '/' + 'checkpoint.pth'`,
        then `torch.load(path + '/' + 'checkpoint.pth')`)."""
        body = self._bodies[id(scope)]
        if isinstance(path, cst.Name):
            bound = body.bindings.get(path.value, [])
            if len(bound) != 1 or bound[0] is None:
                return False
            path = bound[0]
        path_code = self._module.code_for_node(path)
        for call in body.calls:
            if not self._precedes(call, load):
                continue
            callee: cst.BaseExpression = call.func
            if isinstance(callee, cst.Name):
                bound = body.bindings.get(callee.value, [])
                if len(bound) == 1 and isinstance(bound[0], cst.Call):
                    callee = bound[0].func  # an instance, called: its class's code runs
            qualified = qualified_name(scope, callee)
            arguments = tuple((arg.keyword.value if arg.keyword is not None else str(position),
                               self._module.code_for_node(self._bound_once_in(body, arg.value)))
                              for position, arg in enumerate(call.args) if not arg.star)
            if qualified is not None and not qualified.startswith("torch.") and saved_elsewhere(qualified, path_code,
                                                                                                 arguments):
                return True
        return False

    @staticmethod
    def _bound_once_in(body: _Body, value: cst.BaseExpression) -> cst.BaseExpression:
        """What a name the body binds once stands for (`model_path = "best.pth"`); the
        expression itself otherwise."""
        if isinstance(value, cst.Name):
            bound = body.bindings.get(value.value, [])
            if len(bound) == 1 and bound[0] is not None:
                return bound[0]
        return value

    def _built_where_missing(self, load: cst.Call, scope: _Scope, key: str) -> bool:
        """The load reads a cache the program writes itself where it is missing: it runs on
        the side of an existence test of its file (`if os.path.exists(path):`) whose other
        side saves that file. Whichever machine runs it wrote the file (or an earlier run of
        it did, there). Not weights loaded straight into a model, which travel."""
        at = self._order.get(id(load)) if scope is self._module else None
        path = self._path_up(load)
        if any(isinstance(holder, cst.Call) and isinstance(holder.func, cst.Attribute)
               and holder.func.attr.value == "load_state_dict" and any(arg.value is load for arg in holder.args)
               for holder in path[1:3]):
            # Weights loaded into a model (`net.load_state_dict(torch.load(path))`): a checkpoint,
            # which is carried from machine to machine as a cache is not.
            return False
        for child, ancestor in zip(path, path[1:], strict=False):
            if not isinstance(ancestor, cst.If):
                continue
            tested = _existence_test(ancestor.test)
            if tested is None:
                continue
            tested_path, exists_when_true = tested
            if self._key(tested_path, scope, {}, _NAME_DEPTH, at) != key:
                continue
            in_body = child is ancestor.body
            if in_body != exists_when_true or ancestor.orelse is None and in_body:
                continue
            other = ancestor.orelse if in_body else ancestor.body
            if other is not None and any(
                    other in self._path_up(save) and (saved := saved_path(save)) is not None
                    and self._file_key(save, saved, scope, {}) == key for save in self._bodies[id(scope)].saves):
                return True
        return False

    def _common_loop(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        second_ids = {id(node) for node in self._path_up(second)}
        return any(isinstance(node, (cst.For, cst.While)) and id(node) in second_ids for node in self._path_up(first))

    def _runs_whenever(self, node: cst.CSTNode, other: cst.CSTNode) -> bool:
        """Whether every `if`, loop and `try` around `node` is around `other` too."""
        other_ids = {id(ancestor) for ancestor in self._path_up(other)}
        return all(id(ancestor) in other_ids for ancestor in self._path_up(node)[1:]
                   if isinstance(ancestor, (cst.If, cst.For, cst.While, cst.Try, cst.TryStar, cst.Match)))

    # ---- whether a body wrote the file before a point in it ----------------------------

    def _written_before(self, node: cst.CSTNode, scope: _Scope, key: str, depth: int,
                        visiting: set[int]) -> bool:
        body = self._bodies[id(scope)]
        for save in body.saves:
            path = saved_path(save)
            if path is not None and self._precedes(save, node) and _names_the_file(self._file_key(save, path, scope, {}), key):
                return True
        for call in body.calls:
            if self._precedes(call, node) and any(
                    _names_the_file(written, key) for written in self._written_by_call(call, scope, depth, visiting)):
                return True
        if isinstance(scope, cst.FunctionDef) and self._written_by_the_constructor(scope, key):
            return True
        if isinstance(scope, cst.FunctionDef) and depth > 0 and id(scope) not in visiting:
            # Every run of this function comes after the save.
            sites = self._call_sites(scope)
            visiting = visiting | {id(scope)}
            return bool(sites) and all(
                self._written_before(site, self._scope_of[id(site)], key, depth - 1, visiting) for site in sites
            )
        return False

    def _written_by_the_constructor(self, method: cst.FunctionDef, key: str) -> bool:
        """A method of a class whose `__init__` saves the file on every run (an LR finder
        keeping the model's initial weights in `init_params.pt` to restore them after its
        test): every call of the method comes after that save, on the same machine."""
        owner = self._class_of.get(id(method))
        if owner is None or method.name.value == "__init__":
            return False
        init = next((function for function in self._functions.get("__init__", ())
                     if self._class_of.get(id(function)) is owner), None)
        if init is None:
            return False
        for save in self._bodies[id(init)].saves:
            path = saved_path(save)
            if path is None or not _names_the_file(self._file_key(save, path, init, {}), key):
                continue
            # Unconditional in `__init__`: no `if`, loop or `try` between the save and the body.
            if not any(isinstance(ancestor, (cst.If, cst.For, cst.While, cst.Try, cst.TryStar, cst.Match))
                       for ancestor in self._path_up(save)[1:] if self._scope_of.get(id(ancestor)) is init):
                return True
        return False

    def _written_by_call(self, call: cst.Call, caller: _Scope, depth: int, visiting: set[int]) -> set[str]:
        """The files a same-file function writes when `call` runs it."""
        written: set[str] = set()
        for callee in self._callees(call, caller):
            if depth <= 0 or id(callee) in visiting:
                continue
            arguments = self._bind_arguments(callee, call, caller)
            body = self._bodies[id(callee)]
            for save in body.saves:
                path = saved_path(save)
                key = self._file_key(save, path, callee, arguments) if path is not None else None
                if key is not None:
                    written.add(key)
            for inner in body.calls:
                # Arguments passed on are not followed further: a key made of them stays unknown.
                written |= self._written_by_call(inner, callee, depth - 1, visiting | {id(callee)})
        return written

    # ---- path keys -----------------------------------------------------------------------

    def _file_key(self, call: cst.Call, path: cst.BaseExpression, scope: _Scope, arguments: _Arguments) -> str | None:
        """The key of the file a save or load call names: a handle opened by a `with` around
        the call is that `with`'s file (`with open(p, "wb") as f: torch.save(x, f)`), though
        the name is bound to other files elsewhere."""
        if isinstance(path, cst.Name):
            ancestor = self._parent.get(id(call))
            while ancestor is not None and not isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                if isinstance(ancestor, cst.With):
                    for item in ancestor.items:
                        if item.asname is not None and isinstance(item.asname.name, cst.Name) \
                                and item.asname.name.value == path.value:
                            return self._key(item.item, scope, arguments, _NAME_DEPTH)
                ancestor = self._parent.get(id(ancestor))
        # At module level, a name reads the binding before it (a notebook rebinds `PATH` per model).
        at = self._order.get(id(call)) if scope is self._module else None
        return self._key(path, scope, arguments, _NAME_DEPTH, at)

    def _key(self, node: cst.BaseExpression, scope: _Scope, arguments: _Arguments, depth: int,
             at: int | None = None) -> str | None:
        """A text naming the file `node` names, the same wherever the same file is named, or
        None where the file cannot be told."""
        if depth <= 0:
            return None
        if isinstance(node, cst.SimpleString):
            value = string_value(node)
            return repr(value) if value is not None else node.value
        if isinstance(node, (cst.Integer, cst.Float)):
            return node.value
        if isinstance(node, cst.Name):
            return self._name_key(node.value, scope, arguments, depth, at)
        if isinstance(node, cst.Attribute):
            # Attributes of a shared object (`args.save`, `self.best_path`, `cfg.OUT`) name the
            # same thing wherever they are read.
            dotted = dotted_name(node)
            return f"<attr {dotted}>" if dotted is not None else None
        if isinstance(node, cst.ConcatenatedString):
            left = self._key(node.left, scope, arguments, depth, at)
            right = self._key(node.right, scope, arguments, depth, at)
            return None if left is None or right is None else f"{left}+{right}"
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo) \
                and isinstance(node.left, cst.SimpleString):
            # `"ae_%d_%s.pt" % (epoch, device)`: a template, as an f-string's; one too bare to
            # tell its files from others (`"%s.pt" % name`) is keyed by what it is given.
            template = string_value(node.left)
            family = None if template is None else _family(_PERCENT_CONVERSION.sub(_as_placeholder, template))
            if family is not None:
                return family
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            family = self._added_family(node, scope, arguments, depth, at)
            if family is not None:
                return family
        if isinstance(node, cst.BinaryOperation):
            left = self._key(node.left, scope, arguments, depth, at)
            right = self._key(node.right, scope, arguments, depth, at)
            operator = type(node.operator).__name__
            return None if left is None or right is None else f"({left} {operator} {right})"
        if isinstance(node, cst.FormattedString):
            # `f"epoch_{epoch}.pt"`: one of the files the template names (which epoch, the
            # key cannot say; saved in a loop, reloaded after it, it is one this run wrote).
            text = "".join(part.value if isinstance(part, cst.FormattedStringText) else "{}" for part in node.parts)
            return repr(text) if "{}" not in text else _family(text)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "format" \
                and isinstance(node.func.value, cst.SimpleString):
            template = string_value(node.func.value)
            if template is None or any(arg.keyword is not None or arg.star for arg in node.args):
                return None
            return _family(re.sub(r"\{[^{}]*\}", "{}", template))
        if isinstance(node, cst.Subscript) or isinstance(node, cst.Call) and dotted_name(node.func) in _PICKS:
            # `sorted(glob.glob(pattern))[-1]`, `max(glob.glob(pattern), key=os.path.getmtime)`.
            pattern = _globbed_pattern(node.value if isinstance(node, cst.Subscript) else node.args[0].value
                                       if node.args else None)
            if pattern is None:
                return None
            globbed = self._path_text(pattern, scope, arguments, depth, at)
            return None if globbed is None or not _GLOB_CHARACTERS.search(globbed[0]) else f"glob({globbed[0]!r})"
        if isinstance(node, cst.Call) and dotted_name(node.func) in _PATH_JOINS:
            # One key for the file however its path is spelt (`os.path.join("ckpt", f"e{i}.pt")`,
            # `"ckpt/e{}.pt".format(i)`), so that a glob of the folder can be matched with it.
            path_text = self._path_text(node, scope, arguments, depth, at)
            if path_text is not None:
                joined, placeholders = path_text
                return _family(joined) if placeholders else repr(joined) if "<" not in joined else f"path({joined!r})"
        if isinstance(node, cst.Call):
            function = dotted_name(node.func)
            if function is None or function == "open":
                # `open(p, "wb")` is the file p; any other call's result is not known to name
                # the same file twice (`tempfile.mktemp()`).
                if function == "open" and node.args and node.args[0].keyword is None:
                    return self._key(node.args[0].value, scope, arguments, depth, at)
                return None
            if not function.startswith(("os.path.", "path.", "osp.", "Path", "pathlib.")) and function != "str":
                return None
            keys = [self._key(arg.value, scope, arguments, depth, at) for arg in node.args]
            if any(key is None for key in keys) or any(arg.keyword is not None or arg.star for arg in node.args):
                return None
            return f"{function}({', '.join(key for key in keys if key is not None)})"
        return None

    def _path_text(self, node: cst.BaseExpression, scope: _Scope, arguments: _Arguments, depth: int,
                   at: int | None) -> tuple[str, bool] | None:
        """A path's text, `{}` for each part a template leaves open, and whether there is one:
        the parts of `os.path.join(...)` joined by `/`; a part the text cannot give (a folder
        `args.out`) is its key in angle brackets. None where a part cannot be told at all."""
        if isinstance(node, cst.Call) and dotted_name(node.func) in _PATH_JOINS:
            if not node.args or any(arg.keyword is not None or arg.star for arg in node.args):
                return None
            parts = [self._path_text(arg.value, scope, arguments, depth, at) for arg in node.args]
            if any(part is None for part in parts):
                return None
            texts = [part for part in parts if part is not None]
            return "/".join(text.rstrip("/") for text, _ in texts[:-1]) + ("/" if len(texts) > 1 else "") + texts[-1][0], \
                any(placeholders for _, placeholders in texts)
        if isinstance(node, cst.SimpleString):
            value = string_value(node)
            return None if value is None or "<" in value else (value, False)
        key = self._key(node, scope, arguments, depth - 1, at)
        if key is None:
            return None
        template = _FAMILY_KEY.fullmatch(key)
        if template is not None:
            return cast(str, ast.literal_eval(template.group(1))), True
        if key.startswith(("'", '"')):
            value = ast.literal_eval(key)
            return (value, False) if isinstance(value, str) and "<" not in value else None
        return f"<{key}>", False

    def _added_family(self, node: cst.BinaryOperation, scope: _Scope, arguments: _Arguments, depth: int,
                      at: int | None) -> str | None:
        """`args.save + "_epoch_" + str(i) + ".pth"`: a template, as an f-string's, where a part
        is a number made text (`str(...)`) or cannot be told; None where the text has no
        string part, or every part is known (then the sum itself is the key)."""
        operands: list[cst.BaseExpression] = []
        pending: list[cst.BaseExpression] = [node]
        while pending:
            current = pending.pop()
            if isinstance(current, cst.BinaryOperation) and isinstance(current.operator, cst.Add):
                pending.extend((current.right, current.left))
            else:
                operands.append(current)
        if not any(isinstance(operand, cst.SimpleString) for operand in operands):
            return None
        parts: list[str] = []
        placeholders = False
        for operand in operands:
            if isinstance(operand, cst.SimpleString):
                text = string_value(operand)
                if text is None:
                    return None
                parts.append(text)
                continue
            key = None if isinstance(operand, cst.Call) and dotted_name(operand.func) == "str" \
                else self._key(operand, scope, arguments, depth - 1, at)
            placeholders = placeholders or key is None
            parts.append("{}" if key is None else f"<{key}>")
        return _family("".join(parts)) if placeholders else None

    def _name_key(self, name: str, scope: _Scope, arguments: _Arguments, depth: int,
                  at: int | None = None) -> str | None:
        if isinstance(scope, cst.FunctionDef):
            if name in _parameter_names(scope):
                passed = arguments.get(name)
                if passed is None:
                    # `def train(model, save): ... torch.save(..., os.path.join(save, "model.dat"))`,
                    # then the same path loaded in that call: one folder for the whole call.
                    rebound = self._bodies[id(scope)].bindings.get(name)
                    return f"{_PARAMETER_KEY}{id(scope)} {name}>" if rebound is None else None
                expression, caller = passed
                return self._key(expression, caller, {}, depth - 1)
            bindings = self._bodies[id(scope)].bindings.get(name)
            if bindings is not None:
                return self._bound_key(bindings, scope, arguments, depth)
            if name in function_bindings(scope).declared_outer:
                return None
        module = self._bodies[id(self._module)]
        bindings = module.bindings.get(name)
        if bindings is None:
            # Imported or built in: the same object wherever it is read.
            return f"<global {name}>"
        orders = module.binding_orders.get(name, [])
        if at is not None and scope is self._module and None not in orders:
            # Straight-line module code: the binding read is the last one before the use.
            before = [(order, bound) for order, bound in zip(orders, bindings, strict=True) if order is not None and order < at]
            if before:
                order, bound = before[-1]
                return self._key(bound, self._module, {}, depth - 1, order) if bound is not None else None
        key = self._bound_key(bindings, self._module, {}, depth)
        if key is None and self._bound_once(name):
            # `model_file = os.path.join(save_folder, "encoder.pt")` of a folder the file cannot
            # name: one string, bound once, so every read of the name reads the same file.
            return f"<bound once {name}>"
        return key

    def _bound_once(self, name: str) -> bool:
        """Whether a module-level name holds one value for the whole run: a single plain
        assignment in no loop, and no function that declares it `global`."""
        module = self._bodies[id(self._module)]
        bindings = module.bindings.get(name, [])
        statements = module.binding_statements.get(name, [])
        if len(bindings) != 1 or bindings[0] is None or len(statements) != 1:
            return False
        if any(isinstance(ancestor, (cst.For, cst.While)) for ancestor in self._path_up(statements[0])[1:]):
            return False
        return not any(isinstance(scope, cst.FunctionDef) and name in function_bindings(scope).declared_outer
                       for scope in self._scope_by_id.values())

    def _bound_key(self, bindings: list[cst.BaseExpression | None], scope: _Scope, arguments: _Arguments,
                   depth: int) -> str | None:
        # A name bound more than once names one file only where every binding does
        # (`with open(path, "wb") as f`, then `with open(path, "rb") as f`).
        keys = {self._key(bound, scope, arguments, depth - 1) if bound is not None else None for bound in bindings}
        return keys.pop() if len(keys) == 1 else None

    # ---- calls -----------------------------------------------------------------------------

    def _callee(self, call: cst.Call, caller: _Scope) -> cst.FunctionDef | None:
        """The same-file function a call runs: `f(...)` for a module-level `def f`, or
        `self.f(...)` for a method of the caller's class."""
        func = call.func
        if isinstance(func, cst.Name):
            if isinstance(caller, cst.FunctionDef) and func.value in self._bodies[id(caller)].bindings:
                return None
            candidates = [f for f in self._functions.get(func.value, []) if id(f) not in self._class_of]
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) \
                and isinstance(caller, cst.FunctionDef) and id(caller) in self._class_of:
            self_name = _first_parameter(caller)
            if self_name is None or func.value.value != self_name:
                return None
            owner = self._class_of[id(caller)]
            candidates = [f for f in self._functions.get(func.attr.value, []) if self._class_of.get(id(f)) is owner]
        else:
            return None
        return candidates[0] if len(candidates) == 1 else None

    def _callees(self, call: cst.Call, caller: _Scope) -> list[cst.FunctionDef]:
        """The same-file functions a call may run: its `_callee`, or for a method called on
        an object (`trainer.save_checkpoint(path)`), each method of that name in the file's
        classes and each module-level `def name(self, ...)` a class takes on later
        (`setattr(Trainer, "save_checkpoint", save_checkpoint)`)."""
        callee = self._callee(call, caller)
        if callee is not None:
            return [callee]
        func = call.func
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)):
            return []
        if isinstance(caller, cst.FunctionDef) and id(caller) in self._class_of \
                and func.value.value == _first_parameter(caller):
            return []  # `self.f(...)` that `_callee` could not pin down
        return [f for f in self._functions.get(func.attr.value, []) if _takes_self(f)]

    def _call_sites(self, function: cst.FunctionDef) -> list[cst.Call]:
        return [call for body_id, body in self._bodies.items() for call in body.calls
                if function in self._callees(call, self._scope_by_id[body_id])]

    def _bind_arguments(self, callee: cst.FunctionDef, call: cst.Call, caller: _Scope) -> _Arguments:
        params = callee.params
        positional = [*params.posonly_params, *params.params]
        if isinstance(call.func, cst.Attribute) and (id(callee) in self._class_of or _takes_self(callee)):
            positional = positional[1:]  # `self`
        arguments: _Arguments = {}
        for param in (*positional, *params.kwonly_params):
            if param.default is not None:
                arguments[param.name.value] = (param.default, self._scope_of_definition(callee))
        index = 0
        for arg in call.args:
            if arg.star:
                return {}
            if arg.keyword is None:
                if index < len(positional):
                    arguments[positional[index].name.value] = (arg.value, caller)
                index += 1
            else:
                arguments[arg.keyword.value] = (arg.value, caller)
        return arguments

    def _scope_of_definition(self, function: cst.FunctionDef) -> _Scope:
        return self._scope_of.get(id(function), self._module)

    # ---- program order ---------------------------------------------------------------------

    def _precedes(self, earlier: cst.CSTNode, later: cst.CSTNode) -> bool:
        """Whether `earlier` runs before `later` in one pass over their body: it comes first,
        and no `if` sends the two down different branches."""
        if self._order[id(earlier)] >= self._order[id(later)]:
            return False
        earlier_path = self._path_up(earlier)
        later_path = self._path_up(later)
        later_ids = {id(node) for node in later_path}
        for child, ancestor in zip(earlier_path, earlier_path[1:], strict=False):
            if id(ancestor) in later_ids:
                if isinstance(ancestor, (cst.If, cst.Try, cst.TryStar, cst.Match)):
                    later_child = later_path[[id(n) for n in later_path].index(id(ancestor)) - 1]
                    return not _different_branches(ancestor, child, later_child)
                return True
        return True

    def _path_up(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        path = [node]
        while id(path[-1]) in self._parent:
            path.append(self._parent[id(path[-1])])
        return path

    # ---- the walk ------------------------------------------------------------------------------

    def _walk(self, qualified_name: _QualifiedName) -> None:
        if self._walked:
            return
        self._walked = True
        self._bodies[id(self._module)] = _Body()
        self._scope_by_id[id(self._module)] = self._module
        counter = 0
        # (node, its body, the class it is directly in, its nearest structural ancestor). Only
        # statements, their parts and calls get an order and a parent: what program order
        # needs, at a fraction of the memory of every node.
        stack: list[tuple[cst.CSTNode, _Scope, cst.ClassDef | None, cst.CSTNode | None]] = [
            (self._module, self._module, None, None)]
        while stack:
            node, scope, owner, anchor = stack.pop()
            inner_scope, inner_owner, inner_anchor = scope, owner, anchor
            node_type = type(node)
            if node_type is cst.Call or _is_structural(node_type):
                self._order[id(node)] = counter
                counter += 1
                self._scope_of[id(node)] = scope
                if anchor is not None:
                    self._parent[id(node)] = anchor
                inner_anchor = node
            if node_type is cst.FunctionDef:
                node = cast(cst.FunctionDef, node)
                self._functions.setdefault(node.name.value, []).append(node)
                if owner is not None:
                    self._class_of[id(node)] = owner
                self._bind(scope, node.name.value, None)
                self._bodies[id(node)] = _Body()
                self._scope_by_id[id(node)] = node
                inner_scope, inner_owner = node, None
            elif node_type is cst.ClassDef:
                node = cast(cst.ClassDef, node)
                # Class bodies run where they are written; the functions in them are methods.
                self._bind(scope, node.name.value, None)
                inner_owner = node
            elif node_type is cst.Lambda:
                continue  # not run where it is written
            elif node_type is cst.Call:
                self._record_call(cast(cst.Call, node), scope, qualified_name)
            elif node_type in _BINDING_TYPES:
                self._record_bindings(node, scope)
            stack.extend((child, inner_scope, inner_owner, inner_anchor) for child in reversed(child_nodes(node)))

    def _record_call(self, call: cst.Call, scope: _Scope, qualified_name: _QualifiedName) -> None:
        body = self._bodies[id(scope)]
        func = call.func
        written = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
        # Only a call written `save` is asked for its qualified name (which interprets its body).
        if written == "save" and qualified_name(scope, func) in torch_api.TORCH_SAVE:
            body.saves.append(call)
        elif isinstance(func, cst.Name) or isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            body.calls.append(call)  # `f(...)` or `self.f(...)`: maybe a same-file function

    def _record_bindings(self, node: cst.CSTNode, scope: _Scope) -> None:
        if isinstance(node, cst.Assign):
            at = self._top_level_order(node, scope)
            for target in node.targets:
                self._bind_target(scope, target.target, node.value, at)
                if isinstance(target.target, cst.Name):
                    self._bodies[id(scope)].binding_statements.setdefault(target.target.value, []).append(node)
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            self._bind_target(scope, node.target, node.value, self._top_level_order(node, scope))
        elif isinstance(node, (cst.AugAssign, cst.For, cst.CompFor)):
            self._bind_target(scope, node.target, None)
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            self._bind_target(scope, node.asname.name, node.item)
        elif isinstance(node, cst.NamedExpr):
            self._bind_target(scope, node.target, node.value)
        elif isinstance(node, (cst.Import, cst.ImportFrom)) and not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                bound = alias.asname.name if alias.asname is not None else alias.name
                if isinstance(bound, cst.Name):
                    self._bind(scope, bound.value, None)
        elif isinstance(node, cst.ExceptHandler) and node.name is not None:
            self._bind_target(scope, node.name.name, None)

    def _top_level_order(self, statement: cst.CSTNode, scope: _Scope) -> int | None:
        """The program order of a module-level assignment in no block; None elsewhere."""
        line = self._parent.get(id(statement))
        if scope is not self._module or line is None or self._parent.get(id(line)) is not self._module:
            return None
        return self._order.get(id(statement))

    def _bind_target(self, scope: _Scope, target: cst.BaseExpression, value: cst.BaseExpression | None,
                     at: int | None = None) -> None:
        if isinstance(target, cst.Name):
            self._bind(scope, target.value, value, at)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind_target(scope, element.value, None)
        elif isinstance(target, cst.StarredElement):
            self._bind_target(scope, target.value, None)

    def _bind(self, scope: _Scope, name: str, value: cst.BaseExpression | None, at: int | None = None) -> None:
        body = self._bodies[id(scope)]
        body.bindings.setdefault(name, []).append(value)
        body.binding_orders.setdefault(name, []).append(at)


# The key of a path a parameter names, in one call of its function (see `_name_key`).
_PARAMETER_KEY = "<parameter "


_EXISTS_FUNCTIONS = frozenset({"exists", "isfile", "lexists"})
_EXISTS_METHODS = frozenset({"exists", "is_file"})


def _existence_test(test: cst.BaseExpression) -> tuple[cst.BaseExpression, bool] | None:
    """The path an `if` tests for existence (`os.path.exists(p)`, `os.path.isfile(p)`,
    `Path(p).exists()`, `p.is_file()`), and whether the test is true where the file exists
    (false under `not`)."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _existence_test(test.expression)
        return None if inner is None else (inner[0], not inner[1])
    if not isinstance(test, cst.Call) or not isinstance(test.func, cst.Attribute):
        return None
    name = test.func.attr.value
    positional = [arg.value for arg in test.args if arg.keyword is None and not arg.star]
    owner = dotted_name(test.func.value)
    if name in _EXISTS_FUNCTIONS and owner in ("os.path", "osp", "path") and len(positional) == 1:
        return positional[0], True
    if name in _EXISTS_METHODS and not test.args:
        receiver = test.func.value
        if isinstance(receiver, cst.Call) and dotted_name(receiver.func) in ("Path", "pathlib.Path") \
                and len(receiver.args) == 1:
            return receiver.args[0].value, True
        return receiver, True
    return None


def _different_branches(statement: cst.CSTNode, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Whether two children of an `if`/`try`/`match` are parts only one run takes."""
    if isinstance(statement, cst.If):
        return {id(first), id(second)} == {id(statement.body), id(statement.orelse)} \
            if statement.orelse is not None else False
    if isinstance(statement, (cst.Try, cst.TryStar)):
        handlers = {id(handler) for handler in statement.handlers}
        # The body and a handler run together (the handler after part of the body); two
        # handlers, or a handler and the `else`, do not.
        otherwise = {id(statement.orelse)} if statement.orelse is not None else set()
        exclusive = handlers | otherwise
        return id(first) in exclusive and id(second) in exclusive and id(first) != id(second)
    if isinstance(statement, cst.Match):
        return id(first) != id(second)
    return False


def _parameter_names(function: cst.FunctionDef) -> set[str]:
    params = function.params
    names = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            names.add(star.name.value)
    return names


# A conversion of printf-style formatting (`%d`, `%03d`, `%(name)s`, `%.2f`), or `%%`.
_PERCENT_CONVERSION = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\d+|\*)?(?:\.(?:\d+|\*))?[diouxXeEfFgGcrsa%]")


def _as_placeholder(conversion: re.Match[str]) -> str:
    return "%" if conversion.group() == "%%" else "{}"


def _family(template: str) -> str | None:
    """A key for the files a template names (`"{}.pkl"` with its epoch), where its text says
    enough to tell them from others: a name or extension besides the placeholders. Numbers
    count as placeholders: `"ae_20_{}.pt"` (the last epoch, written out) is one of the files
    `"ae_{}_{}.pt"` names."""
    if len(template.replace("{}", "").strip(" ./_-")) < 3:
        return None
    return f"family({re.sub(r'[0-9]+', '{}', template)!r})"


# Functions that join a path's parts, and those that pick one file of a glob's list.
_PATH_JOINS = frozenset({"os.path.join", "osp.join", "path.join"})
_PICKS = frozenset({"max", "min", "sorted"})
_GLOBS = frozenset({"glob.glob", "glob.iglob", "glob"})
_GLOB_CHARACTERS = re.compile(r"[*?]")
_FAMILY_KEY = re.compile(r"family\((.*)\)")
_QUOTED_PATH_KEY = re.compile(r"(?:family|path)\((.*)\)|('.*'|\".*\")")


def _globbed_pattern(listing: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """The pattern of `glob.glob(pattern)`, also as `sorted(...)` of it."""
    while isinstance(listing, cst.Call) and dotted_name(listing.func) == "sorted" and listing.args:
        listing = listing.args[0].value
    if not isinstance(listing, cst.Call) or dotted_name(listing.func) not in _GLOBS or not listing.args:
        return None
    first = listing.args[0]
    return first.value if first.keyword is None and not first.star else None


def _names_the_file(saved: str | None, loaded: str) -> bool:
    """Whether a save's path key names a file a load's key reads: the same key, or a glob
    the saved path (a template's open parts taken as any text) matches."""
    if saved is None:
        return False
    if saved == loaded:
        return True
    if not loaded.startswith("glob("):
        return False
    found = _QUOTED_PATH_KEY.fullmatch(saved)
    if found is None:
        return False
    text = ast.literal_eval(found.group(1) or found.group(2))
    pattern = ast.literal_eval(loaded[len("glob("):-1])
    if not isinstance(text, str) or not isinstance(pattern, str) or "[" in pattern:
        return False
    # A file name's `*` and `?` stop at a folder; `{}`, a part the save leaves open, is any name.
    expression = "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(expression, text.replace("{}", "0")) is not None


def _takes_self(function: cst.FunctionDef) -> bool:
    return _first_parameter(function) == "self"


def _first_parameter(function: cst.FunctionDef) -> str | None:
    params = [*function.params.posonly_params, *function.params.params]
    return params[0].name.value if params else None
