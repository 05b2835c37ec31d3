"""`torchdevlint server`: a Language Server Protocol front end over standard input and output.

Thin by design: buffers are linted and fixed by the same `process_buffer` the CLI's runs go
through, configured by the same `SettingsFinder`; a notebook's cells are linted as the
notebook file they make. This module converts between our positions (1-based line, 1-based
code-point column, code-point offsets) and the client's (0-based line, character in the
negotiated encoding, UTF-16 by default), and keeps the editor responsive: linting runs on one
worker thread, off the thread that answers requests, and each buffer is parsed reusing what
its previous version's tree shares with it.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import io
import json
import tokenize
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.uris import to_fs_path

from torchdevlint import __version__
from torchdevlint.analysis.flow.memory import FlowMemory
from torchdevlint.config import CONFIG_FILE_NAMES, ConfigError
from torchdevlint.diagnostics import Diagnostic, FileError
from torchdevlint.fixer import apply_one_fix
from torchdevlint.incremental_parse import IncrementalParser
from torchdevlint.incremental_syntax import IncrementalSyntaxCheck
from torchdevlint.notebook.document import NotebookDocument
from torchdevlint.programs import NotebookProgram, Program
from torchdevlint.registry import rule_by_code
from torchdevlint.rule import Mark
from torchdevlint.ruledocs import rule_docs_url
from torchdevlint.runner import RunSettings, collect_garbage_rarely, process_buffer
from torchdevlint.settings import SettingsFinder, file_rule_codes, unfixable_codes
from torchdevlint.sourcefile import LINE_BREAK, LineIndex, SourceError
from torchdevlint.suppression import add_noqa

T = TypeVar("T")
SOURCE = "torchdevlint"
FIX_ALL_KIND = f"{types.CodeActionKind.SourceFixAll.value}.torchdevlint"
FIX_ALL_TITLE = "Fix all safely fixable torchdevlint findings"
PYTHON_SUFFIXES = (".py", ".pyi")
# Cells of a notebook in a client's notebook sync; their documents hold the code.
NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(notebook_selector=[
    types.NotebookDocumentFilterWithCells(cells=[types.NotebookCellLanguage(language="python")])])


@dataclass(frozen=True)
class _Cell:
    uri: str
    # 1-based among all the notebook's cells, markdown included, as findings count them.
    number: int
    text: str


@dataclass(frozen=True)
class _Buffer:
    """What is linted as one file: a Python document, or a notebook's cells."""

    # The Python document's, or the notebook's.
    uri: str
    path: Path
    text: str
    # A notebook's cells in order; empty for a Python document.
    cells: tuple[_Cell, ...] = ()
    # A Python document's version, which its findings are published for; not part of what is linted.
    version: int | None = field(default=None, compare=False)

    @property
    def is_notebook(self) -> bool:
        return bool(self.cells)

    def data(self) -> tuple[bytes, str]:
        """The bytes a file with this content would hold, and their encoding."""
        return (self.text.encode("utf-8"), "utf-8") if self.is_notebook else _encoded(self.text)

    def texts(self) -> dict[str, str]:
        """The text of each document the client shows, by URI."""
        return {cell.uri: cell.text for cell in self.cells} if self.is_notebook else {self.uri: self.text}


@dataclass(frozen=True)
class _Linted:
    """The findings of one version of a buffer, kept for code actions on that version."""

    buffer: _Buffer
    diagnostics: tuple[Diagnostic, ...]
    # What kept the buffer (or some cells) from being analysed: a syntax error, an undecodable buffer.
    errors: tuple[FileError, ...]
    run_settings: RunSettings | None
    program: Program | None


@dataclass
class _Kept:
    """What the server keeps of a buffer from one version to the next: its parser (the last
    tree), the flows of its functions (see `analysis.flow.memory`) and Python's own parse."""

    parser: IncrementalParser = field(default_factory=IncrementalParser)
    flows: FlowMemory = field(default_factory=FlowMemory)
    syntax: IncrementalSyntaxCheck = field(default_factory=IncrementalSyntaxCheck)


# How often a full pass of the garbage collector runs, in lints.
_LINTS_PER_COLLECTION = 20

# Past this size a buffer is not linted as it is typed: an 8 MB buffer cost 25 s and 2.7 GB a
# version. Generated code and data dumps get that big; `torchdevlint check` still lints them.
MAX_BUFFER_BYTES = 1 << 20


def _lint(buffer: _Buffer, run_settings: RunSettings | None, kept: _Kept) -> _Linted:
    """On the worker thread: never raises, so a bug shows as a message, not a silent editor."""
    if run_settings is None:
        return _Linted(buffer, (), (), None, None)
    data, _ = buffer.data()
    if len(data) > MAX_BUFFER_BYTES:
        too_large = FileError(str(buffer.path), f"too large to lint as you type ({len(data) / (1 << 20):.1f} MB, "
                                                f"more than {MAX_BUFFER_BYTES >> 20} MB): `torchdevlint check` lints it")
        return _Linted(buffer, (), (too_large,), run_settings, None)
    try:
        result, program = process_buffer(str(buffer.path), data, run_settings, kept.parser.parse, kept.flows,
                                         kept.syntax)
    except Exception as error:  # noqa: BLE001 - reported to the client; the server carries on
        internal = FileError(str(buffer.path), f"internal error ({type(error).__name__}: {error}); please report it")
        return _Linted(buffer, (), (internal,), run_settings, None)
    return _Linted(buffer, tuple(result.diagnostics), tuple(result.errors), run_settings, program)


class _AnsweringProtocol(LanguageServerProtocol):
    """pygls's protocol, answering a request it cannot read: pygls reports params that do not
    fit the request's type to the user but never answers, so the client waits forever. Here
    the request gets the JSON-RPC error (Invalid Params, or Internal Error) as its answer.

    It also forgets each notification once handled: pygls 2 keeps the future of a notification
    whose handler is a generator (its own `didChange` is) in `_request_futures` under a fresh
    id that no response ever removes, about 1.4 KB a keystroke for as long as the server runs."""

    def _handle_notification(self, method_name: str, params: Any) -> None:
        before = set(self._request_futures)
        super()._handle_notification(method_name, params)
        for msg_id in set(self._request_futures) - before:
            self._request_futures[msg_id].add_done_callback(functools.partial(self._forget, msg_id))

    def _forget(self, msg_id: Any, _done: object) -> None:
        self._request_futures.pop(msg_id, None)

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except (JsonRpcInvalidParams, JsonRpcInternalError) as error:
            if "jsonrpc" not in data or "id" not in data or "method" not in data:
                raise
            self._send_response(data["id"], None, error.to_response_error())
            return _Unread()


class _Unread:
    """A request already answered with an error: `handle_message` drops it (no JSON-RPC version)."""

    jsonrpc = None


class TorchDevLintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(SOURCE, __version__, notebook_document_sync=NOTEBOOK_SYNC,
                         protocol_cls=_AnsweringProtocol)
        self._finder: SettingsFinder | None = None
        self._reported_config_errors: set[str] = set()
        # Each file's settings from the last configuration that read: a configuration broken
        # while being typed must not blank the editor's findings until it reads again.
        self._last_good: dict[Path, RunSettings] = {}
        self._linted: dict[str, _Linted] = {}
        self._kept: dict[str, _Kept] = {}
        # Typing fires a change per keystroke. A change to a buffer no lint is working on is
        # linted at once (after the messages already read, so a burst is one lint); a change
        # during its lint is linted when that lint ends, from the buffer as it then stands.
        self._pending: dict[str, asyncio.Handle] = {}
        self._linting: set[str] = set()
        self._changed_while_linting: set[str] = set()
        self._running: set[asyncio.Task[None]] = set()
        # One thread: buffers are linted in the order asked, and what is kept of each is used by
        # one thread.
        self._lint_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torchdevlint-lint")
        # Lints since the last full pass of the garbage collector (see `linted`).
        self._lints_since_collection = 0

    # -- configuration -------------------------------------------------------------------

    def settings_finder(self) -> SettingsFinder:
        if self._finder is None:
            root = self.workspace.root_path
            self._finder = SettingsFinder(Path(root) if root else Path.cwd())
        return self._finder

    def reload_configuration(self) -> None:
        self._finder = None
        self._reported_config_errors.clear()
        self._linted.clear()
        for uri in self.open_buffers():
            self.start_lint(uri)

    def run_settings_for(self, path: Path) -> RunSettings | None:
        try:
            settings = self.settings_finder().for_file(path)
        except ConfigError as error:
            message = f"torchdevlint: {error}"
            if message not in self._reported_config_errors:
                # Once per broken file, not per keystroke; saving a config file reads it again.
                self._reported_config_errors.add(message)
                self.log(types.MessageType.Error, message)
                self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=message))
            self._finder = None
            return self._last_good.get(path)
        codes = file_rule_codes(settings, path)
        good = RunSettings(
            rule_codes=codes,
            rule_options=tuple(sorted(settings.rule_options.items(), key=lambda item: item[0])),
            unfixable=unfixable_codes(settings, codes),
        )
        self._last_good[path] = good
        return good

    # -- buffers -------------------------------------------------------------------------

    def open_buffers(self) -> list[str]:
        """The URIs of what is linted: Python documents not in a notebook, and notebooks."""
        documents = [uri for uri, document in self.workspace.text_documents.items()
                     if self.workspace.get_notebook_document(cell_uri=uri) is None
                     and _is_python(document.language_id, uri)]
        return documents + list(self.workspace.notebook_documents)

    def is_open(self, uri: str) -> bool:
        # The workspace keeps URIs unquoted; clients send them quoted ("my%20file.py").
        return unquote(uri) in self.workspace.text_documents or unquote(uri) in self.workspace.notebook_documents

    def buffer(self, uri: str) -> _Buffer | None:
        """The buffer `uri` (a Python document, a notebook, or a cell of one) is part of, as it
        stands now; None for a document that is not Python."""
        notebook = self.workspace.get_notebook_document(notebook_uri=uri) or self.workspace.get_notebook_document(
            cell_uri=uri)
        if notebook is not None:
            cells = []
            written = []
            for number, cell in enumerate(notebook.cells, start=1):
                document = self.workspace.get_text_document(cell.document)
                cells.append(_Cell(cell.document, number, document.source))
                written.append(_notebook_cell(cell.kind, document.language_id or "", document.source))
            return _Buffer(notebook.uri, _path_of(notebook.uri, "untitled.ipynb"),
                           _notebook_json(written), tuple(cells))
        document = self.workspace.get_text_document(uri)
        if not _is_python(document.language_id, uri):
            return None
        return _Buffer(uri, _path_of(uri, "untitled.py"), document.source, version=document.version)

    def is_current(self, buffer: _Buffer) -> bool:
        now = self.buffer(buffer.uri)
        return now is not None and now.text == buffer.text and now.cells == buffer.cells

    # -- linting -------------------------------------------------------------------------

    async def linted(self, buffer: _Buffer) -> _Linted:
        """The findings of this version of the buffer: those known, or linted now."""
        known = self._linted.get(buffer.uri)
        if known is not None and known.buffer == buffer:
            return known
        run_settings = self.run_settings_for(buffer.path)
        kept = self._kept.setdefault(buffer.uri, _Kept())
        linted = await self.off_the_loop(_lint, buffer, run_settings, kept)
        self._linted[buffer.uri] = linted
        self._lints_since_collection += 1
        if self._lints_since_collection >= _LINTS_PER_COLLECTION:
            # The collector passes rarely (see `serve`), and the protocol's cycles (futures,
            # tasks, exceptions) that outlive a young pass wait for a full one: 10,000
            # keystrokes grew the server by 18 MiB. Between lints a full pass takes well under a
            # millisecond: the trees are freed by then.
            self._lints_since_collection = 0
            gc.collect()
        for error in linted.errors:
            if error.message.startswith("internal error"):
                self.log(types.MessageType.Error, f"torchdevlint: {buffer.uri}: {error.message}")
        return linted

    async def lint_and_publish(self, uri: str) -> None:
        buffer = self.buffer(uri)
        if buffer is None:
            return
        self._linting.add(uri)
        try:
            linted = await self.linted(buffer)
        except Exception as error:  # noqa: BLE001 - logged to the client; the server carries on
            self.log(types.MessageType.Error, f"torchdevlint: internal error on {uri}: {type(error).__name__}: {error}")
            return
        finally:
            self._linting.discard(uri)
            if uri in self._changed_while_linting:
                self._changed_while_linting.discard(uri)
                self.schedule_lint(uri)
        # A buffer changed while it was linted gets its own lint; these findings are stale.
        if self.is_current(buffer):
            self.publish(linted, buffer.version)

    def publish(self, linted: _Linted, version: int | None) -> None:
        buffer = linted.buffer
        by_uri: dict[str, list[types.Diagnostic]] = {uri: [] for uri in buffer.texts()}
        lines_of = {uri: _lines(text) for uri, text in buffer.texts().items()}
        for diagnostic in linted.diagnostics:
            uri = self.document_of(buffer, diagnostic.cell)
            by_uri[uri].append(self.to_lsp(lines_of[uri], diagnostic))
        for error in linted.errors:
            uri = self.document_of(buffer, error.cell)
            by_uri[uri].append(self._error_to_lsp(lines_of[uri], error))
        for uri, published in by_uri.items():
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
                uri=uri, diagnostics=published, version=None if buffer.is_notebook else version))

    @staticmethod
    def document_of(buffer: _Buffer, cell: int | None) -> str:
        """The document a finding is shown in: its cell's, or the buffer's (a notebook's first
        cell for what concerns it as a whole)."""
        if not buffer.is_notebook:
            return buffer.uri
        return next((c.uri for c in buffer.cells if c.number == cell), buffer.cells[0].uri)

    async def off_the_loop(self, work: Callable[..., T], *args: object) -> T:
        """`work(*args)` run on the lint thread, leaving this one free to answer the client."""
        return await asyncio.get_running_loop().run_in_executor(self._lint_thread, work, *args)

    def start_lint(self, uri: str) -> None:
        task = asyncio.ensure_future(self.lint_and_publish(uri))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def schedule_lint(self, uri: str) -> None:
        """Lint `uri` after a change: at once where no lint of it is running, else when it ends."""
        if uri in self._linting:
            self._changed_while_linting.add(uri)
            return
        if uri not in self._pending:
            self._pending[uri] = asyncio.get_running_loop().call_soon(self._lint_pending, uri)

    def _lint_pending(self, uri: str) -> None:
        self._pending.pop(uri, None)
        if self.is_open(uri):
            self.start_lint(uri)

    def forget(self, uri: str, documents: Sequence[str]) -> None:
        """`uri` closed: its findings are cleared from `documents` (its own, or its cells')."""
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self._changed_while_linting.discard(uri)
        self._linted.pop(uri, None)
        self._kept.pop(uri, None)
        for document in documents:
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=document, diagnostics=[]))

    def log(self, kind: types.MessageType, message: str) -> None:
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    # -- positions -----------------------------------------------------------------------

    def position(self, lines: Sequence[str], line: int, column: int) -> types.Position:
        """Our 1-based line and 1-based code-point column as the client counts them."""
        index = min(max(line - 1, 0), max(len(lines) - 1, 0))
        text = lines[index] if lines else ""
        units = self.workspace.position_codec.client_num_units(text[: max(column - 1, 0)])
        return types.Position(line=index, character=units)

    def to_lsp(self, lines: Sequence[str], diagnostic: Diagnostic) -> types.Diagnostic:
        """A finding as the client shows it; `lines` are its document's (`_lines`)."""
        return types.Diagnostic(
            range=types.Range(start=self.position(lines, diagnostic.start.line, diagnostic.start.column),
                              end=self.position(lines, diagnostic.end.line, diagnostic.end.column)),
            severity=types.DiagnosticSeverity.Warning,
            code=diagnostic.code,
            code_description=_rule_page(diagnostic.code),
            source=SOURCE,
            message=diagnostic.message,
            tags=_tags(diagnostic.code),
        )

    def _error_to_lsp(self, lines: Sequence[str], error: FileError) -> types.Diagnostic:
        start = self.position(lines, error.line or 1, error.column or 1)
        end = self.position(lines, error.line or 1, len(lines[start.line]) + 1 if lines else 1)
        return types.Diagnostic(range=types.Range(start=start, end=end), severity=types.DiagnosticSeverity.Error,
                                source=SOURCE, message=error.message)

    def text_edit(self, old_text: str, new_text: str) -> types.TextEdit:
        """The one text edit that turns `old_text` into `new_text`: only what changed, so the
        editor keeps the cursor and folds elsewhere."""
        prefix = 0
        limit = min(len(old_text), len(new_text))
        while prefix < limit and old_text[prefix] == new_text[prefix]:
            prefix += 1
        suffix = 0
        while suffix < limit - prefix and old_text[-1 - suffix] == new_text[-1 - suffix]:
            suffix += 1
        # Never split a CRLF: the halves would sit on different lines.
        if prefix and old_text[prefix - 1] == "\r":
            prefix -= 1
        if suffix and old_text[len(old_text) - suffix] == "\n":
            suffix -= 1
        lines = _lines(old_text)
        index = LineIndex(old_text)
        start_line, start_column = index.location(prefix)
        end_line, end_column = index.location(len(old_text) - suffix)
        start = self.position(lines, start_line, start_column + 1)
        end = self.position(lines, end_line, end_column + 1)
        return types.TextEdit(range=types.Range(start=start, end=end), new_text=new_text[prefix: len(new_text) - suffix])

    def workspace_edit(self, old_texts: dict[str, str], new_texts: dict[str, str]) -> types.WorkspaceEdit | None:
        """Edits turning each document's old text into its new one; None when nothing changes."""
        changes = {uri: [self.text_edit(old_texts[uri], text)] for uri, text in new_texts.items()
                   if text != old_texts[uri]}
        return types.WorkspaceEdit(changes=changes) if changes else None


def _lines(text: str) -> list[str]:
    """Lines as the tokenizer and LSP count them (str.splitlines also breaks at form feeds)."""
    return LINE_BREAK.split(text)


def _encoded(text: str) -> tuple[bytes, str]:
    """The buffer as the file's bytes, in the encoding its coding cookie declares."""
    data = text.encode("utf-8")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        if encoding not in ("utf-8", "utf-8-sig"):
            return text.encode(encoding), encoding
    except (SyntaxError, LookupError, UnicodeEncodeError):
        pass
    return data, "utf-8"


def _notebook_cell(kind: types.NotebookCellKind, language_id: str, source: str) -> dict[str, object]:
    """A cell as a notebook file holds it: code cells in another language are written as raw
    cells, which are not linted."""
    if kind == types.NotebookCellKind.Code and language_id == "python":
        return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
    return {"cell_type": "markdown" if kind == types.NotebookCellKind.Markup else "raw", "metadata": {},
            "source": source}


def _notebook_json(cells: list[dict[str, object]]) -> str:
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1,
                      ensure_ascii=False)


def _path_of(uri: str, untitled: str) -> Path:
    path = to_fs_path(uri)
    # An unsaved buffer is configured as a file in the current folder would be.
    return Path(path) if path else Path.cwd() / untitled


def _is_python(language_id: str | None, uri: str) -> bool:
    return language_id == "python" or uri.endswith(PYTHON_SUFFIXES)


def _is_config_file(uri: str) -> bool:
    return uri.rsplit("/", 1)[-1] in CONFIG_FILE_NAMES


def _ranges_meet(diagnostic_range: types.Range, requested: types.Range) -> bool:
    def key(position: types.Position) -> tuple[int, int]:
        return position.line, position.character

    return key(diagnostic_range.start) <= key(requested.end) and key(requested.start) <= key(diagnostic_range.end)


server = TorchDevLintServer()


@server.feature(types.INITIALIZED)
def _initialized(ls: TorchDevLintServer, params: types.InitializedParams) -> None:
    watching = ls.client_capabilities.workspace
    if watching and watching.did_change_watched_files and watching.did_change_watched_files.dynamic_registration:
        # Clients report file changes only for patterns a server asked for.
        watchers = [types.FileSystemWatcher(glob_pattern=f"**/{name}") for name in sorted(CONFIG_FILE_NAMES)]
        ls.client_register_capability(types.RegistrationParams(registrations=[types.Registration(
            id="torchdevlint-config", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
            register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=watchers))]))


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
async def _did_open(ls: TorchDevLintServer, params: types.DidOpenTextDocumentParams) -> None:
    await ls.lint_and_publish(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def _did_change(ls: TorchDevLintServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.schedule_lint(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
async def _did_save(ls: TorchDevLintServer, params: types.DidSaveTextDocumentParams) -> None:
    if _is_config_file(params.text_document.uri):
        ls.reload_configuration()
    else:
        ls.schedule_lint(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def _did_close(ls: TorchDevLintServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.forget(params.text_document.uri, [params.text_document.uri])


@server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
async def _notebook_did_open(ls: TorchDevLintServer, params: types.DidOpenNotebookDocumentParams) -> None:
    await ls.lint_and_publish(params.notebook_document.uri)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
def _notebook_did_change(ls: TorchDevLintServer, params: types.DidChangeNotebookDocumentParams) -> None:
    structure = params.change.cells.structure if params.change.cells else None
    if structure is not None:
        # Removed cells' findings would otherwise stay in the editor.
        for removed in structure.did_close or []:
            ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=removed.uri, diagnostics=[]))
    ls.schedule_lint(params.notebook_document.uri)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
async def _notebook_did_save(ls: TorchDevLintServer, params: types.DidSaveNotebookDocumentParams) -> None:
    await ls.lint_and_publish(params.notebook_document.uri)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
def _notebook_did_close(ls: TorchDevLintServer, params: types.DidCloseNotebookDocumentParams) -> None:
    ls.forget(params.notebook_document.uri, [cell.uri for cell in params.cell_text_documents])


@server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
def _did_change_watched_files(ls: TorchDevLintServer, params: types.DidChangeWatchedFilesParams) -> None:
    if any(_is_config_file(change.uri) for change in params.changes):
        ls.reload_configuration()


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND], resolve_provider=True),
)
async def _code_action(ls: TorchDevLintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    if not ls.is_open(params.text_document.uri):
        return []  # closed (its file perhaps gone): nothing of it to fix
    buffer = ls.buffer(params.text_document.uri)
    if buffer is None:
        return []
    try:
        linted = await ls.linted(buffer)
        actions = _quick_fixes(ls, linted, params) + await _fix_all(ls, linted, params)
    except Exception as error:  # noqa: BLE001 - logged to the client; the server carries on
        ls.log(types.MessageType.Error, f"torchdevlint: internal error in code actions: {type(error).__name__}: {error}")
        return []
    return actions


@server.feature(types.CODE_ACTION_RESOLVE)
async def _code_action_resolve(ls: TorchDevLintServer, action: types.CodeAction) -> types.CodeAction:
    if action.kind != FIX_ALL_KIND or action.edit is not None:
        return action
    try:
        return await _with_fix_all_edit(ls, action)
    except Exception as error:  # noqa: BLE001 - logged to the client; the server carries on
        ls.log(types.MessageType.Error, f"torchdevlint: internal error fixing all: {type(error).__name__}: {error}")
        return action


def _wants(params: types.CodeActionParams, kind: str) -> bool:
    wanted = params.context.only
    return wanted is None or any(kind.startswith(prefix) for prefix in wanted)


def _quick_fixes(ls: TorchDevLintServer, linted: _Linted, params: types.CodeActionParams) -> list[types.CodeAction]:
    """A fix and a `# noqa` for each finding the requested range meets, in the requested document."""
    if not _wants(params, types.CodeActionKind.QuickFix.value):
        return []
    buffer = linted.buffer
    texts = buffer.texts()
    uri = params.text_document.uri
    if uri not in texts:
        return []
    lines = _lines(texts[uri])
    actions: list[types.CodeAction] = []
    for diagnostic in linted.diagnostics:
        if ls.document_of(buffer, diagnostic.cell) != uri:
            continue
        shown = ls.to_lsp(lines, diagnostic)
        if not _ranges_meet(shown.range, params.range):
            continue
        if diagnostic.fix is not None:
            edit = ls.workspace_edit(texts, _fixed_texts(linted, diagnostic))
            if edit is not None:
                safe = diagnostic.fix.is_safe
                actions.append(types.CodeAction(
                    title=diagnostic.fix.title if safe else f"{diagnostic.fix.title} (unsafe)",
                    kind=types.CodeActionKind.QuickFix, diagnostics=[shown], is_preferred=safe, edit=edit))
        suppressed, added, _ = add_noqa(texts[uri], {diagnostic.start.line: [diagnostic.code]})
        if added:
            actions.append(types.CodeAction(
                title=f"Disable {diagnostic.code} for this line", kind=types.CodeActionKind.QuickFix,
                diagnostics=[shown], edit=ls.workspace_edit(texts, {uri: suppressed})))
    return actions


_TAGS = {Mark.DEPRECATED: types.DiagnosticTag.Deprecated, Mark.UNNECESSARY: types.DiagnosticTag.Unnecessary}


def _rule_page(code: str) -> types.CodeDescription | None:
    url = rule_docs_url(code)
    return types.CodeDescription(href=url) if url is not None else None


def _tags(code: str) -> list[types.DiagnosticTag] | None:
    """How the client may show the reported code (struck through, faded), as its rule says."""
    rule = rule_by_code(code)
    tags = sorted((_TAGS[mark] for mark in rule.marks), key=lambda tag: tag.value) if rule is not None else []
    return tags or None


def _fixed_texts(linted: _Linted, diagnostic: Diagnostic) -> dict[str, str]:
    """Each document's text once this one finding's fix is applied (those it changes)."""
    assert diagnostic.fix is not None
    buffer = linted.buffer
    if not buffer.is_notebook:
        fixed = apply_one_fix(buffer.text, diagnostic.fix)
        return {buffer.uri: fixed} if fixed is not None else {}
    if not isinstance(linted.program, NotebookProgram):
        return {}
    sources = linted.program.sources_fixed_by(diagnostic.fix) or {}
    return {cell.uri: sources[cell.number] for cell in buffer.cells if cell.number in sources}


async def _fix_all(ls: TorchDevLintServer, linted: _Linted, params: types.CodeActionParams) -> list[types.CodeAction]:
    """Every safe fix of the buffer, as `torchdevlint check --fix` would write them; the edit is
    computed when the action is chosen, where the client can ask then (codeAction/resolve)."""
    if not _wants(params, FIX_ALL_KIND) or linted.run_settings is None:
        return []
    if not any(d.fix is not None and d.fix.is_safe for d in linted.diagnostics):
        return []
    action = types.CodeAction(title=FIX_ALL_TITLE, kind=FIX_ALL_KIND, data={"uri": params.text_document.uri})
    if _resolves_edits_later(ls):
        return [action]
    resolved = await _with_fix_all_edit(ls, action)
    return [resolved] if resolved.edit is not None else []


def _resolves_edits_later(ls: TorchDevLintServer) -> bool:
    text_document = ls.client_capabilities.text_document
    code_action = text_document.code_action if text_document else None
    support = code_action.resolve_support if code_action else None
    return support is not None and "edit" in support.properties


async def _with_fix_all_edit(ls: TorchDevLintServer, action: types.CodeAction) -> types.CodeAction:
    data = action.data if isinstance(action.data, dict) else {}
    uri = data.get("uri")
    buffer = ls.buffer(uri) if isinstance(uri, str) else None
    if buffer is None:
        return action
    linted = await ls.linted(buffer)
    if linted.run_settings is None:
        return action
    fixing = replace(linted.run_settings, fix=True)
    fixed = await ls.off_the_loop(_fixed_buffer, buffer, fixing)
    action.edit = ls.workspace_edit(buffer.texts(), fixed) if fixed else None
    return action


def _fixed_buffer(buffer: _Buffer, fixing: RunSettings) -> dict[str, str]:
    """On the worker thread: each document's text with every safe fix applied."""
    data, encoding = buffer.data()
    result, _ = process_buffer(str(buffer.path), data, fixing)
    if result.errors or result.output is None or result.output == data:
        return {}
    if not buffer.is_notebook:
        return {buffer.uri: result.output.decode(encoding)}
    try:
        cells = NotebookDocument.parse(result.output).cells
    except SourceError:
        return {}
    by_number = {cell.number: cell.source for cell in cells}
    return {cell.uri: by_number.get(cell.number, cell.text) for cell in buffer.cells}


def serve() -> None:
    """Serve one client over standard input and output until it says exit."""
    # The open buffers' trees are large and long-lived: with the collector's default
    # thresholds its full passes over them doubled the slower keystrokes' lints.
    collect_garbage_rarely()
    server.start_io()
