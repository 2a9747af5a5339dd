# The failover tests (tests/*/test_failover.py) run three Sentinels from Debian's redis-sentinel package,
# installed here when missing; the primary and the replica are the redis-server the other tests use.
# `make bench-replicas` (under two minutes; QUICK=1 under one) measures what a submit that waits for one
# replica (`WAIT 1`) costs.
.PHONY: sentinel-deps bench-replicas

sentinel-deps:
	@command -v redis-sentinel >/dev/null || { command -v apt-get >/dev/null && \
		(apt-get update -qq && apt-get install -y -qq redis-sentinel) >/dev/null; } || \
		{ echo "test: redis-sentinel is needed (apt-get install redis-sentinel)"; exit 1; }

bench-replicas: install
	@command -v wrk >/dev/null || { command -v apt-get >/dev/null && \
		(apt-get update -qq && apt-get install -y -qq wrk) >/dev/null; } || \
		{ echo "bench: wrk is needed (apt-get install wrk)"; exit 1; }
	$(PY) -m bench.replicas $(if $(QUICK),--quick)

TEST_DEPS += sentinel-deps
