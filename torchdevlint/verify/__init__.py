"""Runtime verification: run each program as written and as fixed, on CUDA or an emulated GPU.

The parent side (`runner`, `report`, `directive`, `protocol`, `expected_errors`) never imports
torch: only the child processes it starts do (`child`, `host`, `emulation`).
"""
