# The several-hosts test (tests/test_hosts.py) builds its own network of namespaces with iproute2's `ip`,
# installed here when missing. It needs root (CAP_NET_ADMIN): elsewhere than CI it is skipped without it.
.PHONY: netns-deps

netns-deps:
	@command -v ip >/dev/null 2>&1 || { command -v apt-get >/dev/null && \
		(apt-get update -qq && apt-get install -y -qq iproute2) >/dev/null; } || \
		{ echo "test: iproute2 is needed (apt-get install iproute2)"; exit 1; }

TEST_DEPS += netns-deps
