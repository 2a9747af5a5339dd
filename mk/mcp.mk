# Client environments for the MCP tests. The 2026-07-28 client (fastmcp + fastmcp-tasks, on mcp>=2) and
# the 2025-11-25 client (mcp 1.x) cannot share one environment, so each gets its own, built once: the
# stamp file is rebuilt only when these rules (and so the pinned versions) change.
MCP26_VENV ?= .venv-mcp26
MCP25_VENV ?= .venv-mcp25
MCP26_PINS := "fastmcp==4.1.4" "fastmcp-tasks==4.1.4"
MCP25_PINS := "mcp==1.30.0"

.PHONY: mcp-clients
mcp-clients: $(MCP26_VENV)/.installed $(MCP25_VENV)/.installed

$(MCP26_VENV)/.installed: mk/mcp.mk
	$(PYTHON) -m venv $(MCP26_VENV)
	$(MCP26_VENV)/bin/python -m pip install -q --upgrade pip
	$(MCP26_VENV)/bin/python -m pip install -q $(MCP26_PINS)
	touch $@

$(MCP25_VENV)/.installed: mk/mcp.mk
	$(PYTHON) -m venv $(MCP25_VENV)
	$(MCP25_VENV)/bin/python -m pip install -q --upgrade pip
	$(MCP25_VENV)/bin/python -m pip install -q $(MCP25_PINS)
	touch $@

TEST_DEPS += mcp-clients
