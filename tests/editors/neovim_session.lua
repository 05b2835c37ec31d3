-- One editing session in a real Neovim (0.7 or later), run headless by test_editor_neovim.py:
-- start `torchdevlint server` with Neovim's own LSP client, wait for findings, ask for the
-- fix-all action, apply the quick fix on line 5, silence line 7's finding a finding with `# noqa`, and write what it saw as
-- JSON to $TORCHDEVLINT_RESULT.
local seen = { diagnostics = {}, actions = {}, fix_all = {} }
local bufnr = vim.api.nvim_get_current_buf()
local client_id = vim.lsp.start_client({
  name = "torchdevlint",
  cmd = vim.fn.json_decode(vim.env.TORCHDEVLINT_SERVER),
  root_dir = vim.fn.getcwd(),
})
vim.lsp.buf_attach_client(bufnr, client_id)
local client = vim.lsp.get_client_by_id(client_id)

local function wait_for(condition)
  return vim.wait(20000, function() return condition(vim.diagnostic.get(bufnr)) end, 20)
end

local function on_line(diagnostics, line)
  for _, diagnostic in ipairs(diagnostics) do
    if diagnostic.lnum == line then return true end
  end
  return false
end

local function actions_at(line, only)
  local params = {
    textDocument = vim.lsp.util.make_text_document_params(bufnr),
    range = { start = { line = line, character = 0 }, ["end"] = { line = line, character = 0 } },
    context = { diagnostics = vim.lsp.diagnostic.get_line_diagnostics(bufnr, line), only = only },
  }
  local response = client.request_sync("textDocument/codeAction", params, 10000, bufnr)
  return (response and response.result) or {}
end

-- An error is written down, not left waiting in a headless editor.
local ok, problem = pcall(function()
  seen.published = wait_for(function(diagnostics) return #diagnostics >= 2 end)
  for _, diagnostic in ipairs(vim.diagnostic.get(bufnr)) do
    -- Neovim keeps columns in bytes: the server's UTF-16 columns, converted by the client.
    table.insert(seen.diagnostics, { line = diagnostic.lnum, column = diagnostic.col, code = diagnostic.code })
  end

  for _, action in ipairs(actions_at(0, { "source.fixAll" })) do
    -- Neovim says it can resolve an action's edit, so the server leaves it to be asked for.
    local resolved = action
    if not action.edit then
      resolved = client.request_sync("codeAction/resolve", action, 10000, bufnr).result
    end
    local edits = {}
    for _, text_edits in pairs(resolved.edit.changes) do
      for _, edit in ipairs(text_edits) do table.insert(edits, edit.newText) end
    end
    table.insert(seen.fix_all, { kind = action.kind, deferred = action.edit == nil, new_texts = edits })
  end

  local chosen
  for _, action in ipairs(actions_at(4)) do
    table.insert(seen.actions, { title = action.title, preferred = action.isPreferred == true })
    if action.isPreferred and action.edit and not chosen then chosen = action end
  end
  if chosen then
    vim.lsp.util.apply_workspace_edit(chosen.edit, client.offset_encoding)
    seen.fixed_line = vim.api.nvim_buf_get_lines(bufnr, 4, 5, false)[1]
    seen.fix_cleared = wait_for(function(diagnostics) return not on_line(diagnostics, 4) end)
  end

  local line = vim.api.nvim_buf_get_lines(bufnr, 6, 7, false)[1]
  vim.api.nvim_buf_set_lines(bufnr, 6, 7, false, { line .. "  # noqa: TDL003" })
  seen.noqa_cleared = wait_for(function(diagnostics) return #diagnostics == 0 end)
end)
if not ok then seen.error = tostring(problem) end

vim.fn.writefile({ vim.fn.json_encode(seen) }, vim.env.TORCHDEVLINT_RESULT)
vim.lsp.stop_client(client_id)
vim.cmd("qall!")
