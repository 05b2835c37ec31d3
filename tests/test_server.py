"""`torchdevlint server`, driven over standard input and output by pygls' own client, as an
editor drives it: diagnostics as documents open and change, code actions that fix them."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

pytest.importorskip("pygls")

from lsprotocol import types  # imported once pygls is known to be there
from pygls.lsp.client import LanguageClient

DEVICE_BUG = "import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device='cuda')\n"
# Each test, server start included, must finish within this; a hang fails instead of blocking CI.
TEST_SECONDS = 60.0
MESSAGE_SECONDS = 20.0


class Editor:
    """The client side of one server process, remembering what it was last told per document."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.client = LanguageClient("torchdevlint-tests", "0")
        self.published: dict[str, asyncio.Queue[list[types.Diagnostic]]] = {}
        self.texts: dict[str, str] = {}
        self.versions: dict[str, int] = {}

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def _published(params: types.PublishDiagnosticsParams) -> None:
            self._queue(params.uri).put_nowait(list(params.diagnostics))

    def _queue(self, uri: str) -> asyncio.Queue[list[types.Diagnostic]]:
        return self.published.setdefault(uri, asyncio.Queue())

    async def start(self) -> None:
        await self.client.start_io(sys.executable, "-m", "torchdevlint", "server", cwd=str(self.root))
        await asyncio.wait_for(self.client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(), root_uri=self.root.as_uri())), MESSAGE_SECONDS)
        self.client.initialized(types.InitializedParams())

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), MESSAGE_SECONDS)
            self.client.exit(None)
        finally:
            await self.client.stop()

    async def diagnostics(self, uri: str) -> list[types.Diagnostic]:
        return await asyncio.wait_for(self._queue(uri).get(), MESSAGE_SECONDS)

    def open(self, name: str, text: str) -> str:
        path = self.root / name
        path.write_text(text, encoding="utf-8")
        uri = path.as_uri()
        self.texts[uri], self.versions[uri] = text, 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        return uri

    def change(self, uri: str, text: str) -> None:
        self.texts[uri] = text
        self.versions[uri] += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))

    async def code_actions(self, uri: str, around: types.Range,
                           only: list[str] | None = None) -> list[types.CodeAction]:
        found = await asyncio.wait_for(self.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=around,
            context=types.CodeActionContext(diagnostics=[], only=only))), MESSAGE_SECONDS)
        return [action for action in found or [] if isinstance(action, types.CodeAction)]

    def apply(self, uri: str, action: types.CodeAction) -> str:
        """The document's text once the action's edit is applied, as an editor applies it."""
        assert action.edit is not None and action.edit.changes is not None
        text = self.texts[uri]
        for edit in sorted(action.edit.changes[uri], key=lambda e: (e.range.start.line, e.range.start.character),
                           reverse=True):
            start, end = _offset(text, edit.range.start), _offset(text, edit.range.end)
            text = text[:start] + edit.new_text + text[end:]
        return text


def _offset(text: str, position: types.Position) -> int:
    """A position in UTF-16 code units (the LSP default) as an offset into `text`."""
    lines = text.splitlines(keepends=True)
    offset = sum(len(line) for line in lines[: position.line])
    units = 0
    line = lines[position.line] if position.line < len(lines) else ""
    for index, char in enumerate(line):
        if units >= position.character:
            return offset + index
        units += 2 if ord(char) > 0xFFFF else 1
    return offset + len(line.rstrip("\r\n"))


def run_session(root: Path, scenario: Callable[[Editor], Awaitable[None]]) -> None:
    async def session() -> None:
        editor = Editor(root)
        await editor.start()
        try:
            await scenario(editor)
        finally:
            await editor.stop()

    asyncio.run(asyncio.wait_for(session(), TEST_SECONDS))


def test_a_device_bug_is_reported_and_its_quick_fix_clears_it(tmp_path: Path) -> None:
    async def scenario(editor: Editor) -> None:
        uri = editor.open("train.py", DEVICE_BUG)
        [found] = await editor.diagnostics(uri)
        assert (found.code, found.source, found.severity) == ("TDL001", "torchdevlint", types.DiagnosticSeverity.Warning)
        assert (found.range.start.line, found.range.start.character) == (2, 0)
        assert (found.range.end.line, found.range.end.character) == (2, 8)
        assert found.code_description is not None
        assert found.code_description.href.endswith("/docs/rules/TDL001.md")

        actions = await editor.code_actions(uri, found.range)
        [fix] = [action for action in actions if action.is_preferred]
        assert fix.kind == types.CodeActionKind.QuickFix
        assert fix.title == "Assign the moved tensor back"
        fixed = editor.apply(uri, fix)
        assert fixed == DEVICE_BUG.replace("\nx.cuda()\n", "\nx = x.cuda()\n")

        editor.change(uri, fixed)
        assert await editor.diagnostics(uri) == []

    run_session(tmp_path, scenario)


def test_code_actions_offer_a_noqa_comment_and_fixing_the_whole_file(tmp_path: Path) -> None:
    async def scenario(editor: Editor) -> None:
        uri = editor.open("train.py", DEVICE_BUG)
        [found] = await editor.diagnostics(uri)
        actions = await editor.code_actions(uri, found.range)
        [disable] = [action for action in actions if action.title == "Disable TDL001 for this line"]
        assert editor.apply(uri, disable).splitlines()[2] == "x.cuda()  # noqa: TDL001"

        whole_file = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=4, character=0))
        [fix_all] = await editor.code_actions(uri, whole_file, only=[types.CodeActionKind.SourceFixAll])
        assert fix_all.kind == "source.fixAll.torchdevlint"
        assert editor.apply(uri, fix_all) == DEVICE_BUG.replace("\nx.cuda()\n", "\nx = x.cuda()\n")

    run_session(tmp_path, scenario)


def test_a_syntax_error_is_one_error_and_the_server_keeps_answering(tmp_path: Path) -> None:
    async def scenario(editor: Editor) -> None:
        broken = editor.open("broken.py", "import torch\nx = torch.zeros(3\n")
        [error] = await editor.diagnostics(broken)
        assert error.severity == types.DiagnosticSeverity.Error
        assert "syntax error" in error.message

        uri = editor.open("train.py", DEVICE_BUG)
        assert [found.code for found in await editor.diagnostics(uri)] == ["TDL001"]

    run_session(tmp_path, scenario)


def test_columns_after_an_astral_character_count_utf16_code_units(tmp_path: Path) -> None:
    async def scenario(editor: Editor) -> None:
        # "😀" is one code point but two UTF-16 code units: `x.cuda()` starts at unit 10.
        uri = editor.open("emoji.py", 'import torch\nx = torch.zeros(3)\ns = "😀"; x.cuda()\n'
                                      "# 中文注释\ny = x + torch.ones(3, device='cuda')\n")
        [found] = await editor.diagnostics(uri)
        assert (found.range.start.line, found.range.start.character) == (2, 10)
        assert (found.range.end.line, found.range.end.character) == (2, 18)
        [fix] = [action for action in await editor.code_actions(uri, found.range) if action.is_preferred]
        assert editor.apply(uri, fix).splitlines()[2] == 's = "😀"; x = x.cuda()'

    run_session(tmp_path, scenario)


def test_a_changed_configuration_file_relints_open_documents(tmp_path: Path) -> None:
    async def scenario(editor: Editor) -> None:
        uri = editor.open("train.py", DEVICE_BUG)
        assert [found.code for found in await editor.diagnostics(uri)] == ["TDL001"]

        config = tmp_path / "pyproject.toml"
        config.write_text('[tool.torchdevlint]\nignore = ["TDL001"]\n', encoding="utf-8")
        editor.client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=config.as_uri(), type=types.FileChangeType.Created)]))
        assert await editor.diagnostics(uri) == []

        config.write_text("[tool.torchdevlint]\n", encoding="utf-8")
        editor.client.text_document_did_save(types.DidSaveTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=config.as_uri())))
        assert [found.code for found in await editor.diagnostics(uri)] == ["TDL001"]

    run_session(tmp_path, scenario)


def test_without_pygls_the_server_command_says_what_to_install(tmp_path: Path) -> None:
    import subprocess

    # A module that is None in sys.modules cannot be imported: pygls is missing, as far as the
    # server command can tell.
    program = ("import sys; sys.modules['pygls'] = None; from torchdevlint.cli import main; "
               "sys.exit(main(['server']))")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == "torchdevlint: error: the server needs pygls: pip install 'torchdevlint[server]'\n"


def test_linting_never_imports_the_server_framework() -> None:
    import subprocess

    program = ("import sys; from torchdevlint.cli import main; main(['check', '--no-cache', '-']); "
               "sys.stdout.write(repr(sorted(m for m in sys.modules if m.split('.')[0] in ('pygls', 'lsprotocol'))))")
    result = subprocess.run([sys.executable, "-c", program], input="import torch\n", capture_output=True,
                            text=True, timeout=60)
    assert result.stdout.endswith("[]")
