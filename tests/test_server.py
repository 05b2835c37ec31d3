"""`torchdevlint server`, driven over standard input and output by pygls' own client, as an
editor drives it: diagnostics as documents open and change, code actions that fix them."""

from __future__ import annotations

import asyncio
import sys
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from conftest import child_environment

pytest.importorskip("pygls")

from lsprotocol import types  # imported once pygls is known to be there
from pygls.lsp.client import LanguageClient

DEVICE_BUG = "import torch\nx = torch.zeros(3)\nx.cuda()\ny = x + torch.ones(3, device='cuda')\n"
# Each test, server start included, must finish within this; a hang fails instead of blocking CI.
TEST_SECONDS = 60.0
MESSAGE_SECONDS = 20.0
# As VS Code and Neovim say: a code action's edit may be asked for once it is chosen.
EDITOR_CAPABILITIES = types.ClientCapabilities(text_document=types.TextDocumentClientCapabilities(
    code_action=types.CodeActionClientCapabilities(
        resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"]))))


class Editor:
    """The client side of one server process, remembering what it was last told per document."""

    def __init__(self, root: Path, capabilities: types.ClientCapabilities = EDITOR_CAPABILITIES) -> None:
        self.root = root
        self.capabilities = capabilities
        self.client = LanguageClient("torchdevlint-tests", "0")
        self.published: dict[str, asyncio.Queue[list[types.Diagnostic]]] = {}
        self.texts: dict[str, str] = {}
        self.versions: dict[str, int] = {}

        self.logged: list[str] = []
        # What the server showed the user (window/showMessage), in order.
        self.shown: asyncio.Queue[str] = asyncio.Queue()

        @self.client.feature(types.WINDOW_SHOW_MESSAGE)
        def _shown(params: types.ShowMessageParams) -> None:
            self.shown.put_nowait(params.message)

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def _published(params: types.PublishDiagnosticsParams) -> None:
            self._queue(params.uri).put_nowait(list(params.diagnostics))

        @self.client.feature(types.WINDOW_LOG_MESSAGE)
        def _logged(params: types.LogMessageParams) -> None:
            self.logged.append(params.message)

    def _queue(self, uri: str) -> asyncio.Queue[list[types.Diagnostic]]:
        return self.published.setdefault(uri, asyncio.Queue())

    async def start(self) -> None:
        await self.client.start_io(sys.executable, "-m", "torchdevlint", "server", cwd=str(self.root),
                                   env=child_environment())
        await asyncio.wait_for(self.client.initialize_async(types.InitializeParams(
            capabilities=self.capabilities, root_uri=self.root.as_uri())), MESSAGE_SECONDS)
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

    async def resolved(self, action: types.CodeAction) -> types.CodeAction:
        return await asyncio.wait_for(self.client.code_action_resolve_async(action), MESSAGE_SECONDS)

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


def run_session(root: Path, scenario: Callable[[Editor], Awaitable[None]],
                capabilities: types.ClientCapabilities = EDITOR_CAPABILITIES) -> None:
    async def session() -> None:
        editor = Editor(root, capabilities)
        await editor.start()
        try:
            await scenario(editor)
        finally:
            await editor.stop()
            print("server log:", *editor.logged, sep="\n")  # shown when the test fails

    asyncio.run(asyncio.wait_for(session(), TEST_SECONDS))


def test_a_device_bug_is_reported_and_its_quick_fix_clears_it(tmp_path: Path) -> None:
    async def scenario(editor: Editor) -> None:
        uri = editor.open("train.py", DEVICE_BUG)
        [found] = await editor.diagnostics(uri)
        assert (found.code, found.source, found.severity) == ("TDL001", "torchdevlint", types.DiagnosticSeverity.Warning)
        assert (found.range.start.line, found.range.start.character) == (2, 0)
        assert (found.range.end.line, found.range.end.character) == (2, 8)
        assert found.code_description is not None
        # The link leads to the rule's page in this checkout, not to a page that may not exist.
        page = found.code_description.href
        assert page.startswith("file://") and page.endswith("/docs/rules/TDL001.md")
        assert Path(urllib.parse.unquote(urllib.parse.urlparse(page).path)).is_file()

        actions = await editor.code_actions(uri, found.range)
        [fix] = [action for action in actions if action.is_preferred]
        assert fix.kind == types.CodeActionKind.QuickFix
        assert fix.title == "Assign the moved tensor back"
        fixed = editor.apply(uri, fix)
        assert fixed == DEVICE_BUG.replace("\nx.cuda()\n", "\nx = x.cuda()\n")

        editor.change(uri, fixed)
        assert await editor.diagnostics(uri) == []

    run_session(tmp_path, scenario)


def test_deprecated_and_unnecessary_code_is_tagged_so(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.torchdevlint]\nextend-select = ["TDL204", "TDL900"]\n',
                                             encoding="utf-8")

    async def scenario(editor: Editor) -> None:
        uri = editor.open("train.py", 'import torch\nx = torch.ones(2).pin_memory("cuda")\ny = x + 1  # noqa: TDL001\n')
        found = {d.code: d for d in await editor.diagnostics(uri)}
        assert list(found["TDL204"].tags or ()) == [types.DiagnosticTag.Deprecated]
        # The editor strikes through the device argument only, not the call.
        assert (found["TDL204"].range.start.character, found["TDL204"].range.end.character) == (29, 35)
        assert list(found["TDL900"].tags or ()) == [types.DiagnosticTag.Unnecessary]

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
        # Computed once chosen: a lightbulb must not cost a fix of the whole file.
        assert fix_all.edit is None
        assert editor.apply(uri, await editor.resolved(fix_all)) == DEVICE_BUG.replace("\nx.cuda()\n", "\nx = x.cuda()\n")

    run_session(tmp_path, scenario)


def test_a_client_that_cannot_resolve_actions_gets_the_fix_all_edit_at_once(tmp_path: Path) -> None:
    async def scenario(editor: Editor) -> None:
        uri = editor.open("train.py", DEVICE_BUG)
        await editor.diagnostics(uri)
        whole_file = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=4, character=0))
        [fix_all] = await editor.code_actions(uri, whole_file, only=[types.CodeActionKind.SourceFixAll])
        assert editor.apply(uri, fix_all) == DEVICE_BUG.replace("\nx.cuda()\n", "\nx = x.cuda()\n")

    run_session(tmp_path, scenario, types.ClientCapabilities())


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

        # A notebook's cells are linted together again, not each on its own.
        cells = _open_notebook(editor, "train.ipynb")
        assert [[d.code for d in await editor.diagnostics(cell)] for cell in cells] == [[], [], ["TDL001"]]
        config.write_text('[tool.torchdevlint]\nignore = ["TDL002"]\n', encoding="utf-8")
        editor.client.text_document_did_save(types.DidSaveTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=config.as_uri())))
        assert [found.code for found in await editor.diagnostics(uri)] == ["TDL001"]
        assert [[d.code for d in await editor.diagnostics(cell)] for cell in cells] == [[], [], ["TDL001"]]
        for cell in cells:
            assert editor.published[cell].empty()

    run_session(tmp_path, scenario)


def test_a_configuration_broken_while_typed_keeps_the_last_good_settings(tmp_path: Path) -> None:
    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.torchdevlint]\nselect = ["TDL001"]\n', encoding="utf-8")

    async def scenario(editor: Editor) -> None:
        uri = editor.open("train.py", DEVICE_BUG)
        assert [found.code for found in await editor.diagnostics(uri)] == ["TDL001"]
        for broken in (b'[tool.torchdevlint]\nselect = ["TDL0', b'[tool.torchdevlint]\n# caf\xe9\nselect = []\n'):
            config.write_bytes(broken)  # half typed; then a byte that is not UTF-8
            editor.client.text_document_did_save(types.DidSaveTextDocumentParams(
                text_document=types.TextDocumentIdentifier(uri=config.as_uri())))
            assert "pyproject.toml" in await asyncio.wait_for(editor.shown.get(), MESSAGE_SECONDS)
            assert [found.code for found in await editor.diagnostics(uri)] == ["TDL001"]
            editor.change(uri, DEVICE_BUG + "\n")
            assert [found.code for found in await editor.diagnostics(uri)] == ["TDL001"]
        config.write_text('[tool.torchdevlint]\nignore = ["TDL001"]\n', encoding="utf-8")
        editor.client.text_document_did_save(types.DidSaveTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=config.as_uri())))
        assert await editor.diagnostics(uri) == []

    run_session(tmp_path, scenario)


def test_a_buffer_past_the_size_budget_gets_one_line_saying_so(tmp_path: Path) -> None:
    huge = DEVICE_BUG + "data = [" + "1, " * 700_000 + "]\n"  # about 2 MB

    async def scenario(editor: Editor) -> None:
        uri = editor.open("generated.py", huge)
        [only] = await editor.diagnostics(uri)
        assert "too large to lint as you type" in only.message and "torchdevlint check" in only.message
        editor.change(uri, DEVICE_BUG)
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


NOTEBOOK_CELLS = (
    (types.NotebookCellKind.Markup, "markdown", "# Training on the GPU\n"),
    (types.NotebookCellKind.Code, "python", "%matplotlib inline\nimport torch\nx = torch.zeros(3)\n"),
    (types.NotebookCellKind.Code, "python", "x.cuda()\ny = x + torch.ones(3, device='cuda')\n"),
)


def _cell_uri(notebook: Path, index: int) -> str:
    # As VS Code names them: the notebook's path, a fragment per cell.
    return f"vscode-notebook-cell:{notebook.as_posix()}#W{index}sZmlsZQ%3D%3D"


def _open_notebook(editor: Editor, name: str,
                   cells: tuple[tuple[types.NotebookCellKind, str, str], ...] = NOTEBOOK_CELLS) -> list[str]:
    path = editor.root / name
    uris = [_cell_uri(path, index) for index in range(len(cells))]
    for uri, (_, _, text) in zip(uris, cells, strict=True):
        editor.texts[uri], editor.versions[uri] = text, 1
    editor.client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(
            uri=path.as_uri(), notebook_type="jupyter-notebook", version=1,
            cells=[types.NotebookCell(kind=kind, document=uri) for uri, (kind, _, _) in zip(uris, cells, strict=True)]),
        cell_text_documents=[types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)
                             for uri, (_, language, text) in zip(uris, cells, strict=True)]))
    return uris


def test_a_notebook_is_linted_as_one_program_with_findings_in_their_cells(tmp_path: Path) -> None:
    async def scenario(editor: Editor) -> None:
        markdown, first, second = _open_notebook(editor, "train.ipynb")
        published = {uri: await editor.diagnostics(uri) for uri in (markdown, first, second)}
        assert published[markdown] == [] and published[first] == []
        # `x` was made in the cell before: the finding needs both cells.
        [found] = published[second]
        assert found.code == "TDL001"
        assert (found.range.start.line, found.range.start.character, found.range.end.character) == (0, 0, 8)

        [fix] = [action for action in await editor.code_actions(second, found.range) if action.is_preferred]
        assert fix.edit is not None and fix.edit.changes is not None and list(fix.edit.changes) == [second]
        fixed = editor.apply(second, fix)
        assert fixed == NOTEBOOK_CELLS[2][2].replace("x.cuda()", "x = x.cuda()")
        [disable] = [a for a in await editor.code_actions(second, found.range) if a.title.startswith("Disable")]
        assert editor.apply(second, disable).splitlines()[0] == "x.cuda()  # noqa: TDL001"

        editor.client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(uri=(tmp_path / "train.ipynb").as_uri(),
                                                                        version=2),
            change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(text_content=[
                types.NotebookDocumentCellContentChanges(
                    document=types.VersionedTextDocumentIdentifier(uri=second, version=2),
                    changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)])]))))
        published = {uri: await editor.diagnostics(uri) for uri in (markdown, first, second)}
        assert published == {markdown: [], first: [], second: []}

    run_session(tmp_path, scenario)


def test_fixing_a_whole_notebook_edits_only_the_cells_that_change(tmp_path: Path) -> None:
    async def scenario(editor: Editor) -> None:
        markdown, first, second = _open_notebook(editor, "train.ipynb")
        for uri in (markdown, first, second):
            await editor.diagnostics(uri)
        everything = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=2, character=0))
        [fix_all] = await editor.code_actions(second, everything, only=[types.CodeActionKind.SourceFixAll])
        fix_all = await editor.resolved(fix_all)
        assert fix_all.edit is not None and fix_all.edit.changes is not None
        assert list(fix_all.edit.changes) == [second]
        assert editor.apply(second, fix_all).startswith("x = x.cuda()\n")

    run_session(tmp_path, scenario)


def test_a_cell_that_does_not_parse_is_one_error_and_the_others_are_linted(tmp_path: Path) -> None:
    cells = (*NOTEBOOK_CELLS, (types.NotebookCellKind.Code, "python", "def broken(:\n"))

    async def scenario(editor: Editor) -> None:
        uris = _open_notebook(editor, "broken.ipynb", cells)
        published = [await editor.diagnostics(uri) for uri in uris]
        assert [found.code for found in published[2]] == ["TDL001"]
        [error] = published[3]
        assert error.severity == types.DiagnosticSeverity.Error and "syntax error" in error.message
        assert error.range.start.line == 0

    run_session(tmp_path, scenario)


def test_closing_documents_clears_their_findings(tmp_path: Path) -> None:
    async def scenario(editor: Editor) -> None:
        uri = editor.open("train.py", DEVICE_BUG)
        assert [found.code for found in await editor.diagnostics(uri)] == ["TDL001"]
        editor.client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))
        assert await editor.diagnostics(uri) == []

        cells = _open_notebook(editor, "train.ipynb")
        assert [await editor.diagnostics(cell) != [] for cell in cells] == [False, False, True]
        editor.client.notebook_document_did_close(types.DidCloseNotebookDocumentParams(
            notebook_document=types.NotebookDocumentIdentifier(uri=(tmp_path / "train.ipynb").as_uri()),
            cell_text_documents=[types.TextDocumentIdentifier(uri=cell) for cell in cells]))
        assert [await editor.diagnostics(cell) for cell in cells] == [[], [], []]

    run_session(tmp_path, scenario)


def test_a_broken_configuration_file_is_shown_once_and_named(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.torchdevlint]\nselect = ["TDL001"\n', encoding="utf-8")

    async def scenario(editor: Editor) -> None:
        uri = editor.open("train.py", DEVICE_BUG)
        assert await editor.diagnostics(uri) == []
        message = await asyncio.wait_for(editor.shown.get(), MESSAGE_SECONDS)
        assert "pyproject.toml" in message
        editor.change(uri, DEVICE_BUG + "\n")
        assert await editor.diagnostics(uri) == []
        assert editor.shown.empty()

    run_session(tmp_path, scenario)


def test_a_buffer_in_another_encoding_is_linted_and_fixed_as_its_file(tmp_path: Path) -> None:
    latin = ("# -*- coding: latin-1 -*-\nimport torch\nx = torch.zeros(3)\ns = 'café'; x.cuda()\n"
             "y = x + torch.ones(3, device='cuda')\n")

    async def scenario(editor: Editor) -> None:
        uri = editor.open("latin.py", latin)
        [found] = await editor.diagnostics(uri)
        assert (found.range.start.line, found.range.start.character) == (3, 12)
        whole = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=5, character=0))
        [fix_all] = await editor.code_actions(uri, whole, only=[types.CodeActionKind.SourceFixAll])
        assert editor.apply(uri, await editor.resolved(fix_all)) == latin.replace("; x.cuda()", "; x = x.cuda()")

        unknown = editor.open("unknown.py", "# coding: no-such-codec\nimport torch\n")
        [error] = await editor.diagnostics(unknown)
        assert error.severity == types.DiagnosticSeverity.Error and "no-such-codec" in error.message

    run_session(tmp_path, scenario)


def test_a_file_whose_uri_is_quoted_is_linted_after_a_change(tmp_path: Path) -> None:
    async def scenario(editor: Editor) -> None:
        uri = editor.open("my train.py", DEVICE_BUG)
        assert "%20" in uri
        assert [found.code for found in await editor.diagnostics(uri)] == ["TDL001"]
        editor.change(uri, DEVICE_BUG.replace("\nx.cuda()\n", "\nx = x.cuda()\n"))
        assert await editor.diagnostics(uri) == []

    run_session(tmp_path, scenario)


def test_crlf_line_endings_survive_quick_fixes(tmp_path: Path) -> None:
    crlf = DEVICE_BUG.replace("\n", "\r\n")

    async def scenario(editor: Editor) -> None:
        uri = editor.open("windows.py", crlf)
        [found] = await editor.diagnostics(uri)
        assert (found.range.start.line, found.range.end.character) == (2, 8)
        [fix] = [action for action in await editor.code_actions(uri, found.range) if action.is_preferred]
        fixed = editor.apply(uri, fix)
        assert fixed == crlf.replace("\r\nx.cuda()\r\n", "\r\nx = x.cuda()\r\n")
        editor.change(uri, fixed)
        assert await editor.diagnostics(uri) == []

    run_session(tmp_path, scenario)


def test_a_deleted_cell_loses_its_findings_and_an_added_one_is_linted(tmp_path: Path) -> None:
    async def scenario(editor: Editor) -> None:
        markdown, first, second = _open_notebook(editor, "train.ipynb")
        for uri in (markdown, first, second):
            await editor.diagnostics(uri)
        notebook = types.VersionedNotebookDocumentIdentifier(uri=(tmp_path / "train.ipynb").as_uri(), version=2)
        editor.client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
            notebook_document=notebook, change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(structure=types.NotebookDocumentCellChangeStructure(
                    array=types.NotebookCellArrayChange(start=2, delete_count=1, cells=[]),
                    did_close=[types.TextDocumentIdentifier(uri=second)])))))
        assert await editor.diagnostics(second) == []

        added = _cell_uri(tmp_path / "train.ipynb", 7)
        notebook = types.VersionedNotebookDocumentIdentifier(uri=notebook.uri, version=3)
        editor.client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
            notebook_document=notebook, change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(structure=types.NotebookDocumentCellChangeStructure(
                    array=types.NotebookCellArrayChange(start=2, delete_count=0, cells=[
                        types.NotebookCell(kind=types.NotebookCellKind.Code, document=added)]),
                    did_open=[types.TextDocumentItem(uri=added, language_id="python", version=1,
                                                     text="x.cuda()\n")])))))
        while (found := await editor.diagnostics(added)) == []:
            pass  # the publish after the deletion, before the cell was added
        assert [d.code for d in found] == ["TDL001"]

    run_session(tmp_path, scenario)


def test_requests_are_answered_while_a_long_file_is_linted(tmp_path: Path) -> None:
    functions = "".join(
        f"def step_{n}(model, batch):\n    inputs = batch[0].cuda()\n    hidden = torch.zeros(4, 8)\n"
        f"    out = model(inputs) + hidden.to(inputs.device)\n    return out.cpu().numpy()\n\n\n"
        for n in range(600))
    long_file = "import torch\n\n\n" + functions

    async def scenario(editor: Editor) -> None:
        uri = editor.open("train.py", DEVICE_BUG)
        [found] = await editor.diagnostics(uri)
        long_uri = editor.open("long.py", long_file)
        actions = asyncio.ensure_future(editor.code_actions(uri, found.range))  # fixing all is resolved later
        published = asyncio.ensure_future(editor.diagnostics(long_uri))
        done, _ = await asyncio.wait({actions, published}, return_when=asyncio.FIRST_COMPLETED)
        # Linting runs off the thread that answers: the answer does not wait for the long lint.
        assert actions in done and not published.done()
        assert any(action.is_preferred for action in actions.result())
        await published

    run_session(tmp_path, scenario)


def test_code_actions_for_a_closed_document_whose_file_is_gone_are_none(tmp_path: Path) -> None:
    async def scenario(editor: Editor) -> None:
        uri = editor.open("train.py", DEVICE_BUG)
        assert [found.code for found in await editor.diagnostics(uri)] == ["TDL001"]
        editor.client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))
        (tmp_path / "train.py").unlink()
        everything = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=9, character=0))
        assert await editor.code_actions(uri, everything) == []
        assert not any("internal error" in line for line in editor.logged)

    run_session(tmp_path, scenario)


def test_a_request_with_invalid_params_gets_an_error_answer(tmp_path: Path) -> None:
    """Raw JSON-RPC: a typed client cannot send params that do not fit the request."""
    import json
    import select
    import subprocess
    import time

    server = subprocess.Popen([sys.executable, "-m", "torchdevlint", "server"], cwd=tmp_path, env=child_environment(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert server.stdin is not None and server.stdout is not None

    def send(message: dict[str, object]) -> None:
        body = json.dumps(message).encode()
        assert server.stdin is not None
        server.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        server.stdin.flush()

    def answer_to(request: int) -> dict[str, object] | None:
        deadline = time.monotonic() + MESSAGE_SECONDS
        assert server.stdout is not None
        while time.monotonic() < deadline:
            if not select.select([server.stdout], [], [], 0.2)[0]:
                continue
            length = 0
            while line := server.stdout.readline().strip():
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            message = json.loads(server.stdout.read(length))
            if message.get("id") == request:
                return message  # type: ignore[no-any-return]  # a JSON object
        return None

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"capabilities": {}, "rootUri": tmp_path.as_uri()}})
        assert answer_to(1) is not None
        send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        # A code action request without its range and context.
        send({"jsonrpc": "2.0", "id": 2, "method": "textDocument/codeAction",
              "params": {"textDocument": {"uri": (tmp_path / "x.py").as_uri()}}})
        answer = answer_to(2)
        assert answer is not None, "the request was never answered"
        assert answer["error"] == {"code": -32602, "message": "Invalid Params"}
        send({"jsonrpc": "2.0", "id": 3, "method": "shutdown"})
        assert answer_to(3) == {"jsonrpc": "2.0", "id": 3, "result": None}
        send({"jsonrpc": "2.0", "method": "exit"})
        server.wait(MESSAGE_SECONDS)
    finally:
        server.kill()
        server.wait()


def _resident_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS:"))


_TYPED_INTO = """
import torch
import torch.nn as nn


class Block{n}(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))

    def forward(self, x):
        mask = torch.ones(x.size(0), x.size(1), device=x.device).tril()
        return self.layers(x) * mask


def train{n}(model, loader, device):
    model.to(device)
    for inputs, targets in loader:
        loss = nn.functional.mse_loss(model(inputs.to(device)), targets.to(device))
        loss.backward()
"""


class _Written:
    """Where an in-process server's messages go: kept, to count what it published."""

    def __init__(self) -> None:
        self.messages: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.messages.append(data)

    def close(self) -> None:
        pass


def test_the_server_keeps_nothing_of_the_notifications_it_has_handled(tmp_path: Path) -> None:
    """Each keystroke is a notification; pygls 2 kept one future per `didChange` for the life of
    the server (about 1.4 KB a keystroke: 14 MB over 10,000 edits, issue 37's slow growth)."""
    from torchdevlint.server import TorchDevLintServer

    async def typing() -> tuple[int, int]:
        server = TorchDevLintServer()
        protocol = server.protocol
        written = _Written()
        protocol.set_writer(written)
        uri = (tmp_path / "model.py").as_uri()
        protocol._handle_notification(types.TEXT_DOCUMENT_DID_OPEN, types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=DEVICE_BUG)))
        for version in range(2, 302):
            protocol._handle_notification(types.TEXT_DOCUMENT_DID_CHANGE, types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=DEVICE_BUG + "#" * version)]))
            await asyncio.sleep(0)
        await asyncio.sleep(0.5)
        return len(protocol._request_futures), len(written.messages)

    kept, published = asyncio.run(asyncio.wait_for(typing(), TEST_SECONDS))
    assert published >= 2  # it linted and published as it went
    assert kept == 0


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's memory from /proc")
def test_the_server_s_memory_stays_flat_over_thousands_of_edits(tmp_path: Path) -> None:
    """Each lint's analysis is freed: typing for an hour costs no more memory than typing for
    a minute (issue 37: 10,000 edits measured with `benchmarks/server_memory.py`, 69 -> 70 MiB;
    here 800 each linted and published)."""
    text = "".join(_TYPED_INTO.format(n=n) for n in range(12))
    at = text.index("        loss.backward()")

    async def scenario(editor: Editor) -> None:
        uri = editor.open("model.py", text)
        await editor.diagnostics(uri)
        pid = editor.client._server.pid  # the server process pygls started
        samples: dict[int, int] = {}
        typed = "        # "
        for edit in range(1, 801):
            typed += "abcdefghij"[edit % 10]
            editor.change(uri, text[:at] + typed + "\n" + text[at:])
            await editor.diagnostics(uri)
            if edit in (200, 800):
                samples[edit] = _resident_mib(pid)
        print("server memory (MiB) after 200 and 800 edits:", samples)
        assert samples[800] - samples[200] <= 3

    async def session() -> None:
        editor = Editor(tmp_path)
        await editor.start()
        try:
            await scenario(editor)
        finally:
            await editor.stop()

    asyncio.run(asyncio.wait_for(session(), 600))
