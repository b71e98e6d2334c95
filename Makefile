# The two commands of the README: `make demo` (main job) and `make test`.
# Both set up .venv first (idempotent; seconds when it is already complete).
PYTHON_VENV := .venv/bin/python

.PHONY: setup demo test test-slow bench

setup:
	@bash scripts/setup.sh

demo: setup
	PYTHONUNBUFFERED=1 $(PYTHON_VENV) tools/main_job.py

test: setup
	PYTHONUNBUFFERED=1 $(PYTHON_VENV) -m pytest

test-slow: setup
	PYTHONUNBUFFERED=1 $(PYTHON_VENV) -m pytest -m slow

# MAViT-T against Swin-T (backbone forward, training step, UperNet), JSON + PNG
# under benchmarks/results/; then `python benchmarks/readme_tables.py --write`.
bench: setup
	PYTHONUNBUFFERED=1 $(PYTHON_VENV) benchmarks/speed_vs_swin.py
