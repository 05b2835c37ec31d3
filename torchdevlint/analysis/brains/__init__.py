"""What the analysis knows about torch and its conventions: data tables, looked up by name."""
