"""Shared analysis: torch API tables, import-based name resolution, the device-flow model."""
