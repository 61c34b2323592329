# The README's two commands: `make demo` (the main job) and `make test` (the whole suite); `make conformance` the full matrix,
# `make docs` the documentation site (strict: a broken link fails it).
# Each creates .venv and installs what it needs; re-runs reuse it while pyproject.toml is unchanged.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# CPU build of torch, installed before anything that depends on torch so no CUDA build is pulled.
TORCH_SPEC ?= torch==2.13.0
# The development environment runs the newest supported releases (the matrix, `make compat`, runs the others); naming
# them also spares pip's resolver a search through every verl and TRL release the extras allow.
FRAMEWORK_SPEC ?= verl==0.9.1 trl==1.16.0
STAMP := $(VENV)/.installed

.PHONY: install test conformance compat compat-ci compat-next demo bench lint docs directory release clean

install: $(STAMP)

$(STAMP): pyproject.toml examples/rllm-median-baseline/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[all]" --group dev $(FRAMEWORK_SPEC)
	$(PY) -m pip install --quiet ./examples/rllm-median-baseline
	touch $(STAMP)

# phase by phase (conftest.py: --phases), with the elapsed time; pytest's summary line stays the last line
test: $(STAMP)
	@echo "make test [1/2]: ruff check"
	$(PY) -m ruff check .
	@echo "make test [2/2]: pytest over tests/, integration_tests/ and the example plugin's tests, folder by folder"
	$(PY) -m pytest -q --phases

# the whole conformance matrix (estimators x paths x relations, every seed, scale and hostile option value);
# `make test` runs its fast sample
conformance: $(STAMP)
	RLLM_CONFORMANCE=full $(PY) -m pytest -q tests/conformance integration_tests/conformance

# the version matrix (noxfile.py): each cell in its own venv under .nox/; writes compat/last_run.json, then the README's table
compat: $(STAMP)
	$(VENV)/bin/nox $(ARGS); status=$$?; $(PY) compat/table.py; exit $$status

# CI's share of the matrix: the oldest and the newest cell of each framework and of the core's Python range
compat-ci: $(STAMP)
	$(VENV)/bin/nox -t ci

# verl's next release before it ships: verl main and verl main with verl PR #7237, built from a local git copy of
# github.com/verl-project/verl (VERL_GIT, holding the commits noxfile.py names); never in CI, which has no such copy
VERL_GIT ?= .nox/src/verl.git
compat-next: $(STAMP)
	RLLM_COMPAT_VERL_GIT="$(VERL_GIT)" $(VENV)/bin/nox -t next $(ARGS); status=$$?; $(PY) compat/table.py; exit $$status

demo: $(STAMP)
	$(PY) examples/demo/rllm_demo.py $(ARGS)

# stores the results (benchmarks/results.json) and regenerates docs/benchmarks.md; ARGS=--check fails on a missed target
bench: $(STAMP)
	$(PY) -m benchmarks.run --store benchmarks/results.json $(ARGS)

# reruns `rllm-plugins check NAME --json` of every entry of docs/directory.toml into docs/directory_results.json, then renders docs/directory.md
directory: $(STAMP)
	$(PY) tools/directory.py --results

# a release (docs/development.md): checks CHANGELOG.md, builds and checks the sdist and wheel, installs the wheel in a new venv
# and runs the demo's first table there, then sets __version__ and writes dist/; ARGS=--dry-run changes nothing
release: $(STAMP)
	$(PY) tools/release.py $(VERSION) --torch-spec "$(TORCH_SPEC)" --framework-spec "$(FRAMEWORK_SPEC)" $(ARGS)

docs: $(STAMP)
	$(PY) -m mkdocs build --strict --quiet

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# everything a build, an install or a test run leaves in the tree (the example plugin's and the fixtures' too)
clean:
	rm -rf $(VENV) .nox build dist site *.egg-info .pytest_cache .ruff_cache .hypothesis demo_output outputs
	rm -rf examples/*/build examples/*/dist examples/*/*.egg-info tests/plugins/fixtures/*/build tests/plugins/fixtures/*/*.egg-info tests/plugins/mistakes/*/build tests/plugins/mistakes/*/*.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
