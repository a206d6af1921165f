"""The `deskside` command: typer apps, one module per command group, over the library.

`common` holds what every command shares (consoles, `--json`, `fail`); `app` assembles the
groups and is the console entry point (`deskside.cli.app:main`)."""
