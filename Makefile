# privreid developer entry points.  `make demo` and `make test` create or refresh
# .venv themselves; a second run reinstalls nothing unless pyproject.toml or
# constraints.txt changed.  PYTHON: 3.11 or 3.12 (README "Install").
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The extras the tests need, at the tested versions (constraints.txt).
EXTRAS := test,flower,export,simulation
PIP    := $(BIN)/python -m pip --disable-pip-version-check
DEMO   := runs/demo
# Demo budget: see README "The demo" and configs/demo-cpu.yaml.  Same seed and data for every model.
DEMO_ARGS := --config configs/demo-cpu.yaml --overwrite
# The demo's leakage/robustness report, sized for a CPU: unseen domain, FGSM + PGD on 60 queries,
# the full corruption mix (3 repeats), 2 inversion subjects (shared-update threat model).  Full settings: docs/leakage-and-robustness.md.
REPORT_ARGS := --suite attacks,corruptions,inversion --testsets unseen --attacks fgsm,pgd --steps 5 \
	--max-queries 60 --corruptions all --repeats 3 --subjects 2 --iterations 100 --threat shared --quiet

.PHONY: venv test test-all demo bench docs lock clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@sh scripts/install-torch.sh $(BIN)/python constraints.txt
	$(PIP) install --quiet -c constraints.txt -e '.[$(EXTRAS)]'
	$(PIP) check
	@touch $(STAMP)

venv: $(STAMP)

# Two workers: CI has two cores, and the suite's tests are independent (each writes only its tmp_path).
# The layering contracts first ([tool.importlinter] in pyproject.toml, docs/architecture.md): seconds, not minutes.
test: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -m "not slow" -q -n 2

test-all: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -n 2

# One torch thread: a float reduction's order may depend on the thread count.  The digits also depend on the CPU's
# kernels (ATen's capability, oneDNN's ISA, MKL): README "The demo" gives the spread over seeds and kernels
# (benchmarks/demo_spread.py), and each run's env.json records its kernels.
demo: export OMP_NUM_THREADS = 1
demo: $(STAMP)
	$(BIN)/privreid train --method centralized $(DEMO_ARGS) --out $(DEMO)/centralized
	$(BIN)/privreid train --method fedpav $(DEMO_ARGS) --out $(DEMO)/fedpav
	$(BIN)/privreid compare $(DEMO)/centralized/ckpt.pt $(DEMO)/fedpav/ckpt.pt --markdown $(DEMO)/table.md
	$(BIN)/privreid compare --models $(DEMO)/centralized/ckpt.pt $(DEMO)/fedpav/ckpt.pt $(REPORT_ARGS) --out $(DEMO)/report

bench: $(STAMP)
	$(BIN)/python benchmarks/eval_metrics.py

# The documentation site (mkdocs.yml) into site/; --strict: a broken link, a missing page or an API
# object the docstrings no longer have fails the build.
DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): $(STAMP)
	$(PIP) install --quiet -c constraints.txt -e '.[$(EXTRAS),docs]'
	$(PIP) check
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(BIN)/mkdocs build --strict --site-dir site
	$(BIN)/python scripts/check_site.py site

# Re-resolve constraints.txt from pyproject.toml's ranges in a fresh venv (then run make test-all).
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --disable-pip-version-check '.[$(EXTRAS),bench,docs]'
	.lock-venv/bin/python -m pip check
	{ sed -n '/^#/p' constraints.txt; .lock-venv/bin/python -m pip freeze --exclude privreid; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) .lock-venv runs site .pytest_cache
