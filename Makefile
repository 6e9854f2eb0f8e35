# privreid developer entry points.  `make demo` and `make test` create or refresh
# .venv themselves; a second run reinstalls nothing unless pyproject.toml changed.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Installed without its dependencies on purpose: see the comment in pyproject.toml.
TORCHATTACKS := torchattacks==3.5.1
DEMO   := runs/demo
# Demo budget: see README "Demo" and configs/demo-cpu.yaml.  Same seed and data for every model.
DEMO_ARGS := --config configs/demo-cpu.yaml --overwrite
# The demo's leakage/robustness report, sized for a CPU: unseen domain, FGSM + PGD on 60 queries,
# the full corruption mix (3 repeats), 2 inversion subjects (shared-update threat model).  Full settings: README "Leakage and robustness".
REPORT_ARGS := --suite attacks,corruptions,inversion --testsets unseen --attacks fgsm,pgd --steps 5 \
	--max-queries 60 --corruptions all --repeats 3 --subjects 2 --iterations 100 --threat shared --quiet

.PHONY: venv test test-all demo bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps $(TORCHATTACKS)
	@touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -q

test-all: $(STAMP)
	$(BIN)/python -m pytest -q

demo: $(STAMP)
	$(BIN)/privreid train --method centralized $(DEMO_ARGS) --out $(DEMO)/centralized
	$(BIN)/privreid train --method fedpav $(DEMO_ARGS) --out $(DEMO)/fedpav
	$(BIN)/privreid compare $(DEMO)/centralized/ckpt.pt $(DEMO)/fedpav/ckpt.pt --markdown $(DEMO)/table.md
	$(BIN)/privreid compare --models $(DEMO)/centralized/ckpt.pt $(DEMO)/fedpav/ckpt.pt $(REPORT_ARGS) --out $(DEMO)/report

bench: $(STAMP)
	$(BIN)/python benchmarks/eval_metrics.py

clean:
	rm -rf $(VENV) runs .pytest_cache
