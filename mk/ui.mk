# The web page's browser test (tests/adapters/ui/test_ui.py) drives Debian's chromium through Playwright;
# Playwright's own browser download is not used.
CHROMIUM ?= /usr/bin/chromium
TEST_DEPS += $(CHROMIUM)

$(CHROMIUM):
	SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	$$SUDO apt-get install -y chromium || { $$SUDO apt-get update && $$SUDO apt-get install -y chromium; }

.PHONY: ui-browser
ui-browser: $(CHROMIUM)
