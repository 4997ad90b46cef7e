"""A handler module that fails to import, for the CLI's error test."""

BROKEN = 1 / 0
