# The two commands of the README: `make demo` (main job) and `make test`
# (lint, then the tests).
# Both set up .venv first (idempotent; seconds when it is already complete).
PYTHON_VENV := .venv/bin/python

.PHONY: setup demo lint test test-slow bench

setup:
	@bash scripts/setup.sh

demo: setup
	PYTHONUNBUFFERED=1 $(PYTHON_VENV) tools/main_job.py

# ruff's linter (ruff.toml) and import-linter's contracts (.importlinter).
lint: setup
	.venv/bin/ruff check .
	PYTHONPATH=$(CURDIR) .venv/bin/lint-imports

# One pytest worker per core (pytest-xdist); tests sharing an expensive
# fixture stay on one worker (--dist loadgroup, the xdist_group marks), and the
# work goes out in the order tests/conftest.py gives it (heaviest first by the
# recorded durations: tests/helpers/durations.py), not by test count.
test: lint
	PYTHONUNBUFFERED=1 $(PYTHON_VENV) -m pytest -n auto --dist loadgroup --no-loadscope-reorder

# The tests make test leaves out (README.md says which and why), on every core.
# The bundled demo data first (tools/make_demo_data.py: seconds, the same
# bytes every time), which the slow launch test trains on as shipped.
test-slow: setup
	$(PYTHON_VENV) tools/make_demo_data.py
	PYTHONUNBUFFERED=1 $(PYTHON_VENV) -m pytest -m slow -n auto --dist loadgroup

# MAViT-T against Swin-T (backbone forward, training step, UperNet), JSON + PNG
# under benchmarks/results/; then `python benchmarks/readme_tables.py --write`.
bench: setup
	PYTHONUNBUFFERED=1 $(PYTHON_VENV) benchmarks/speed_vs_swin.py
