# Two entry points for a fresh machine: `make serve` and `make test` (what CI runs);
# `make test-fast` leaves out the tests marked slow. Everything they need is installed
# here, into .venv, on first use.

VENV := .venv
PY := $(VENV)/bin/python
CHROMIUM := /usr/bin/chromium

.PHONY: serve test test-fast lint install

serve: $(VENV)/.installed
	$(VENV)/bin/statetrail serve

test: $(VENV)/.installed-test $(CHROMIUM) lint
	$(VENV)/bin/pytest

test-fast: $(VENV)/.installed-test $(CHROMIUM) lint
	$(VENV)/bin/pytest -m "not slow"

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

install: $(VENV)/.installed

$(VENV)/.created:
	"$$(scripts/find-python)" -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	touch $@

$(VENV)/.installed: $(VENV)/.created pyproject.toml
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml producer/pyproject.toml
	$(PY) -m pip install --quiet -e ".[test]" -e "./producer[langgraph,llama-index]"
	touch $@

# Browser tests drive Debian's Chromium through Playwright (no browser download).
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
		echo "Install Debian's chromium package (sudo apt-get install chromium)" >&2; exit 1; \
	fi
