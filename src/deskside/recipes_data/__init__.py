"""Recipes shipped with deskside (loaded by name, e.g. `deskside demo` uses local-tiny)."""
