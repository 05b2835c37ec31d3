"""`torchdevlint server`: a Language Server Protocol front end over standard input and output.

Thin by design: buffers are linted and fixed by the same `process_bytes` the CLI runs on
standard input, configured by the same `SettingsFinder`; this module only converts between
our positions (1-based line, 1-based code-point column, code-point offsets) and the client's
(0-based line, character in the negotiated encoding, UTF-16 by default).

Not handled yet: notebook documents (LSP notebook sync).
"""

from __future__ import annotations

import asyncio
import io
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from torchdevlint import __version__
from torchdevlint.config import CONFIG_FILE_NAMES, ConfigError
from torchdevlint.diagnostics import Diagnostic, FileError
from torchdevlint.fixer import apply_fixes
from torchdevlint.runner import RunSettings, process_bytes
from torchdevlint.settings import SettingsFinder, file_rule_codes
from torchdevlint.sourcefile import LINE_BREAK, LineIndex
from torchdevlint.suppression import add_noqa

SOURCE = "torchdevlint"
# Every rule's page; one place to change when the repository moves.
RULE_DOCS_URL = "https://github.com/torchdevlint/torchdevlint/blob/main/docs/rules/{code}.md"
FIX_ALL_KIND = f"{types.CodeActionKind.SourceFixAll.value}.torchdevlint"
PYTHON_SUFFIXES = (".py", ".pyi")
# Typing fires a change per keystroke; only the buffer as it stands after a pause is linted.
CHANGE_DELAY_SECONDS = 0.2


@dataclass(frozen=True)
class _Linted:
    """The findings of one version of a buffer, kept for code actions on that version."""

    text: str
    diagnostics: tuple[Diagnostic, ...]
    # What kept the buffer from being analysed: a syntax error, an undecodable buffer.
    errors: tuple[FileError, ...]
    run_settings: RunSettings | None


class TorchDevLintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(SOURCE, __version__)
        self._finder: SettingsFinder | None = None
        self._linted: dict[str, _Linted] = {}
        self._pending: dict[str, asyncio.TimerHandle] = {}

    # -- configuration -------------------------------------------------------------------

    def settings_finder(self) -> SettingsFinder:
        if self._finder is None:
            root = self.workspace.root_path
            self._finder = SettingsFinder(Path(root) if root else Path.cwd())
        return self._finder

    def reload_configuration(self) -> None:
        self._finder = None
        self._linted.clear()
        for uri in list(self.workspace.text_documents):
            self.lint_and_publish(uri)

    def run_settings_for(self, path: Path) -> RunSettings | None:
        try:
            settings = self.settings_finder().for_file(path)
        except ConfigError as error:
            self.log(types.MessageType.Error, f"torchdevlint: {error}")
            self._finder = None
            return None
        return RunSettings(
            rule_codes=file_rule_codes(settings, path),
            rule_options=tuple(sorted(settings.rule_options.items(), key=lambda item: item[0])),
        )

    # -- linting -------------------------------------------------------------------------

    def lint_and_publish(self, uri: str) -> None:
        """Never raises: an editor must not lose its linter to one bad buffer."""
        document = self.workspace.get_text_document(uri)
        if not _is_python(document):
            return
        try:
            linted = self._lint(document)
            lines = _lines(linted.text)
            published = [self.to_lsp(lines, d) for d in linted.diagnostics]
            published += [self._error_to_lsp(lines, error) for error in linted.errors]
        except Exception as error:  # noqa: BLE001 - logged to the client; the server carries on
            self.log(types.MessageType.Error, f"torchdevlint: internal error on {uri}: {type(error).__name__}: {error}")
            return
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=published, version=document.version))

    def _lint(self, document: TextDocument) -> _Linted:
        text = document.source
        run_settings = self.run_settings_for(_document_path(document))
        if run_settings is None:
            linted = _Linted(text, (), (), None)
        else:
            data, _ = _encoded(text)
            result = process_bytes(str(_document_path(document)), data, run_settings, in_place=False)
            linted = _Linted(text, tuple(result.diagnostics), tuple(result.errors), run_settings)
        self._linted[document.uri] = linted
        return linted

    def linted(self, document: TextDocument) -> _Linted:
        known = self._linted.get(document.uri)
        return known if known is not None and known.text == document.source else self._lint(document)

    def schedule_lint(self, uri: str) -> None:
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self._pending[uri] = asyncio.get_running_loop().call_later(
            CHANGE_DELAY_SECONDS, self._lint_pending, uri)

    def _lint_pending(self, uri: str) -> None:
        self._pending.pop(uri, None)
        if uri in self.workspace.text_documents:
            self.lint_and_publish(uri)

    def forget(self, uri: str) -> None:
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self._linted.pop(uri, None)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

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
        """A finding as the client shows it; `lines` are its text's (`_lines`)."""
        return types.Diagnostic(
            range=types.Range(start=self.position(lines, diagnostic.start.line, diagnostic.start.column),
                              end=self.position(lines, diagnostic.end.line, diagnostic.end.column)),
            severity=types.DiagnosticSeverity.Warning,
            code=diagnostic.code,
            code_description=types.CodeDescription(href=RULE_DOCS_URL.format(code=diagnostic.code)),
            source=SOURCE,
            message=diagnostic.message,
        )

    def _error_to_lsp(self, lines: Sequence[str], error: FileError) -> types.Diagnostic:
        start = self.position(lines, error.line or 1, error.column or 1)
        end = self.position(lines, error.line or 1, len(lines[start.line]) + 1 if lines else 1)
        return types.Diagnostic(range=types.Range(start=start, end=end), severity=types.DiagnosticSeverity.Error,
                                source=SOURCE, message=error.message)

    def edit_to(self, document: TextDocument, new_text: str) -> types.WorkspaceEdit:
        """The one text edit that turns the document into `new_text`: only what changed, so
        the editor keeps the cursor and folds elsewhere."""
        old_text = document.source
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
        replaced = new_text[prefix: len(new_text) - suffix]
        edit = types.TextEdit(range=types.Range(start=start, end=end), new_text=replaced)
        return types.WorkspaceEdit(changes={document.uri: [edit]})


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


def _document_path(document: TextDocument) -> Path:
    path = to_fs_path(document.uri)
    # An unsaved buffer is configured as a file in the current folder would be.
    return Path(path) if path else Path.cwd() / "untitled.py"


def _is_python(document: TextDocument) -> bool:
    return document.language_id == "python" or document.uri.endswith(PYTHON_SUFFIXES)


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
def _did_open(ls: TorchDevLintServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.lint_and_publish(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
async def _did_change(ls: TorchDevLintServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.schedule_lint(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def _did_save(ls: TorchDevLintServer, params: types.DidSaveTextDocumentParams) -> None:
    if _is_config_file(params.text_document.uri):
        ls.reload_configuration()
    else:
        ls.lint_and_publish(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def _did_close(ls: TorchDevLintServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.forget(params.text_document.uri)


@server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
def _did_change_watched_files(ls: TorchDevLintServer, params: types.DidChangeWatchedFilesParams) -> None:
    if any(_is_config_file(change.uri) for change in params.changes):
        ls.reload_configuration()


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND]),
)
def _code_action(ls: TorchDevLintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    document = ls.workspace.get_text_document(params.text_document.uri)
    if not _is_python(document):
        return []
    try:
        return _code_actions(ls, document, params)
    except Exception as error:  # noqa: BLE001 - logged to the client; the server carries on
        ls.log(types.MessageType.Error, f"torchdevlint: internal error in code actions: {type(error).__name__}: {error}")
        return []


def _code_actions(ls: TorchDevLintServer, document: TextDocument,
                  params: types.CodeActionParams) -> list[types.CodeAction]:
    linted = ls.linted(document)
    wanted = params.context.only
    actions: list[types.CodeAction] = []
    if wanted is None or any(types.CodeActionKind.QuickFix.value.startswith(kind) for kind in wanted):
        lines = _lines(linted.text)
        for diagnostic in linted.diagnostics:
            shown = ls.to_lsp(lines, diagnostic)
            if not _ranges_meet(shown.range, params.range):
                continue
            if diagnostic.fix is not None:
                fixed, applied = apply_fixes(linted.text, [diagnostic.fix])
                if applied and fixed != linted.text:
                    safe = diagnostic.fix.is_safe
                    actions.append(types.CodeAction(
                        title=diagnostic.fix.title if safe else f"{diagnostic.fix.title} (unsafe)",
                        kind=types.CodeActionKind.QuickFix, diagnostics=[shown], is_preferred=safe,
                        edit=ls.edit_to(document, fixed)))
            suppressed, added, _ = add_noqa(linted.text, {diagnostic.start.line: [diagnostic.code]})
            if added:
                actions.append(types.CodeAction(
                    title=f"Disable {diagnostic.code} for this line", kind=types.CodeActionKind.QuickFix,
                    diagnostics=[shown], edit=ls.edit_to(document, suppressed)))
    if wanted is None or any(FIX_ALL_KIND.startswith(kind) for kind in wanted):
        if linted.run_settings is not None and any(d.fix is not None and d.fix.is_safe for d in linted.diagnostics):
            data, encoding = _encoded(linted.text)
            fixing = RunSettings(rule_codes=linted.run_settings.rule_codes,
                                 rule_options=linted.run_settings.rule_options, fix=True)
            result = process_bytes(str(_document_path(document)), data, fixing, in_place=False)
            if not result.errors and result.output is not None and result.output != data:
                actions.append(types.CodeAction(
                    title="Fix all safely fixable torchdevlint findings", kind=FIX_ALL_KIND,
                    edit=ls.edit_to(document, result.output.decode(encoding))))
    return actions


def serve() -> None:
    """Serve one client over standard input and output until it says exit."""
    server.start_io()
