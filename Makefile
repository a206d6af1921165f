# The two set-up commands of the README. Each installs what it needs by itself.
.PHONY: demo test check lint

demo:
	@scripts/bootstrap --with-proxy
	@scripts/system-deps
	DESKSIDE_LITELLM=$(CURDIR)/.venv-proxy/bin/litellm .venv/bin/deskside demo

test:
	@scripts/bootstrap --with-proxy
	@scripts/system-deps
	scripts/run-tests

lint:
	@scripts/bootstrap
	.venv/bin/ruff check src tests benchmarks
	.venv/bin/ruff format --check src tests
	.venv/bin/mypy

# The inner loop (under 2 minutes on two cores): lint, types and the unit tier in parallel.
check:
	@scripts/bootstrap
	.venv/bin/ruff check src tests benchmarks
	.venv/bin/mypy
	.venv/bin/python -m pytest -p no:cacheprovider -q -n auto tests/unit
