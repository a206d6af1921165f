# The two set-up commands of the README. Each installs what it needs by itself.
.PHONY: demo test lint

demo:
	@scripts/bootstrap
	.venv/bin/deskside model tiny --arch deepseek-v3 --out .deskside/models/tiny-deepseek-v3
	.venv/bin/deskside plan recipes/local-tiny.yaml

test:
	@scripts/bootstrap
	@scripts/system-deps
	scripts/run-tests

lint:
	@scripts/bootstrap
	.venv/bin/ruff check src tests
	.venv/bin/ruff format --check src tests
	.venv/bin/mypy
