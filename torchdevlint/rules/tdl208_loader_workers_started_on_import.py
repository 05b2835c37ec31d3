"""TDL208 loader-workers-started-on-import."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.flow.results import Held
from torchdevlint.analysis.loader_workers import LoaderWorkers, WorkerLoader
from torchdevlint.analysis.tree import is_main_guard
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import WORKERS_STARTED_WHILE_BOOTSTRAPPING, RuntimeProof

# Calls that hand on what they iterate: `enumerate(loader)`, `tqdm(loader)`, `iter(loader)`.
_PASSING_ON = frozenset({"enumerate", "iter", "tqdm", "zip", "next", "list", "trange"})


class LoaderWorkersStartedOnImport(Rule):
    """
    ## What it does
    Finds a DataLoader with worker processes (`num_workers=2`, `num_workers=os.cpu_count()`)
    that the script iterates in code that runs when the script is imported: at the top level,
    or in a function the top level calls, outside `if __name__ == "__main__":`.

    ## Why is this bad?
    On macOS and Windows, Python starts a worker process by spawning a fresh interpreter that
    imports the main script again before it runs the worker. Everything at the script's top
    level runs again in each worker: the worker builds the loader, reaches the training
    loop and tries to start workers of its own, and fails with "RuntimeError: An attempt has
    been made to start a new process before the current process has finished its
    bootstrapping phase". The script runs on Linux, which forks its workers, and fails on
    the laptops its readers run it on.

    ## Not reported
    Loaders iterated under `if __name__ == "__main__":` or only in functions the top level
    does not call, loaders without workers (`num_workers=0`, the default) or whose workers
    start fresh (`multiprocessing_context="spawn"` in code written for it), and notebooks,
    whose cells are not imported again.

    ## Fix safety
    No fix: the remedy is to move the script's top-level work into a function called under
    `if __name__ == "__main__":`, which changes what importing the file does. Setting
    `num_workers=0` also avoids the error, at the cost of loading in the training process.

    ## Options
    None. Off by default (a portability rule): select it (`--select TDL208`, or
    `extend-select = ["TDL208"]`) for code meant to run on macOS or Windows, such as course
    material.
    """

    code = "TDL208"
    slug = "loader-workers-started-on-import"
    # Portability: right on Linux, which forks its workers; many research scripts are only run there.
    default_enabled = False
    message = "DataLoader workers are started by code that runs on import: spawned workers re-run it (macOS, Windows)"
    proof = RuntimeProof(WORKERS_STARTED_WHILE_BOOTSTRAPPING, host="cpu",
                         not_emulated="a platform that starts processes by spawning them (macOS, Windows)")
    requires_any_text = ("num_workers",)

    VALID = [
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            def main():
                data = TensorDataset(torch.randn(64, 3), torch.randint(0, 2, (64,)))
                loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=2)
                for inputs, targets in loader:
                    print(inputs.shape, targets.shape)

            if __name__ == "__main__":
                main()
            """,
            name="the-script-runs-under-a-main-guard",
            in_docs=True,
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            data = TensorDataset(torch.randn(64, 3))
            loader = DataLoader(data, batch_size=8, num_workers=0)
            fast = DataLoader(data, batch_size=8, num_workers=4)
            for (inputs,) in loader:
                print(inputs.mean())

            def evaluate():
                for (inputs,) in fast:
                    print(inputs.std())
            """,
            name="no-workers-at-the-top-level-and-a-function-nobody-calls",
        ),
    ]

    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn
            from torch.utils.data import DataLoader, TensorDataset

            data = TensorDataset(torch.randn(64, 3), torch.randint(0, 2, (64,)))
            loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=2)
            model = nn.Linear(3, 2)
            for inputs, targets in loader:
                loss = nn.functional.cross_entropy(model(inputs), targets)
            """,
            name="a-tutorial-script-training-at-the-top-level",
            in_docs=True,
        ),
        Invalid(
            """
            import os
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            NUM_WORKERS = os.cpu_count()
            train_loader = DataLoader(TensorDataset(torch.randn(64, 3)), batch_size=8, num_workers=NUM_WORKERS)
            test_loader = DataLoader(TensorDataset(torch.randn(16, 3)), batch_size=8, num_workers=2)

            def train(epoch):
                for batch_index, (inputs,) in enumerate(train_loader):
                    print(epoch, batch_index, inputs.sum())

            def run():
                for epoch in range(3):
                    train(epoch)

            run()
            """,
            name="through-functions-the-top-level-calls",
        ),
    ]

    def setup(self) -> None:
        self._workers = self.context.shared(LoaderWorkers)
        # What is iterated, and where: None for the code that runs on import, else the
        # function (its id) the iteration is in.
        self._iterated: list[tuple[cst.BaseExpression, int | None]] = []
        # Calls of names, by where they are made (as above): `train(epoch)`, `run()`.
        self._calls: list[tuple[str, int | None]] = []
        # The module's top-level functions, by name.
        self._functions: dict[str, int] = {}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self.context.parent(node) is self.context.module:
            self._functions.setdefault(node.name.value, id(node))

    def visit_For(self, node: cst.For) -> None:
        where = self._where(node)
        if where is not False:
            self._iterated.append((node.iter, where))

    def visit_CompFor(self, node: cst.CompFor) -> None:
        where = self._where(node)
        if where is not False:
            self._iterated.append((node.iter, where))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Name):
            return
        where = self._where(node)
        if where is False:
            return
        if func.value in ("iter", "next") and node.args:
            self._iterated.append((node.args[0].value, where))
        else:
            self._calls.append((func.value, where))

    def _where(self, node: cst.CSTNode) -> int | None | bool:
        """None where the node runs on import, the id of the top-level function it is in,
        False elsewhere (in a class, a nested function, under the main guard)."""
        function: cst.FunctionDef | None = None
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, (cst.ClassDef, cst.Lambda)):
                return False
            if isinstance(ancestor, cst.FunctionDef):
                if function is not None:
                    return False  # a nested function: out of this rule's sight
                function = ancestor
            elif isinstance(ancestor, cst.If) and is_main_guard(ancestor.test) and function is None:
                return False
        return None if function is None else id(function)

    def leave_Module(self, node: cst.Module) -> None:
        loaders = self._workers.loaders()
        if not loaders or self.context.path.endswith(".ipynb"):
            return
        by_call = {id(loader.call): loader for loader in loaders}
        started: dict[int | None, list[WorkerLoader]] = {}
        flow = self.context.flow
        for iterable, where in self._iterated:
            for call in flow.held_calls(flow.value_of(_passed_on(iterable)), Held.DATALOADER):
                loader = by_call.get(id(call))
                if loader is not None and loader not in started.setdefault(where, []):
                    started[where].append(loader)
        # Functions that call functions that start workers start them too.
        changed = True
        while changed:
            changed = False
            for name, where in self._calls:
                callee = self._functions.get(name)
                if callee is None or callee == where or not started.get(callee):
                    continue
                into = started.setdefault(where, [])
                for loader in started[callee]:
                    if loader not in into:
                        into.append(loader)
                        changed = True
        for loader in sorted(started.get(None, []), key=loaders.index):
            self.report(loader.call, message=(
                f"DataLoader workers (num_workers={self.context.code_for_node(loader.num_workers.value)}) started by "
                f"code that runs on import: on macOS and Windows each spawned worker runs it again and fails "
                f"(\"start a new process before ... bootstrapping phase\"); run it under "
                f"`if __name__ == \"__main__\":`"))


def _passed_on(iterable: cst.BaseExpression) -> cst.BaseExpression:
    """`enumerate(loader)`, `tqdm(iter(loader))`: the loader."""
    while isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) \
            and iterable.func.value in _PASSING_ON and iterable.args:
        iterable = iterable.args[0].value
    return iterable
