"""Shared analysis: torch API tables, import-based name resolution, value-kind inference."""
