"""`python -m deskside.cli ...` runs the `deskside` command."""

from deskside.cli.app import main

main()
