# `make test-cluster`: the service's test suite with the job store on a three-primary Redis Cluster started on
# loopback ports for the run (and stopped after it), an embedded Redis as the Celery broker. `make test` runs
# tests/tasks_backend/test_cluster.py (a cluster of its own) and the slot check of every script instead.
# Left out: the suites that test clients or browsers rather than the store (JS/MCP clients, conformance, UI,
# fuzzing), and the ones that kill or stall one Redis on purpose (their own single server).
CLUSTER_TESTS ?= tests/tasks_backend \
	tests/adapters/test_http_jobs.py tests/adapters/test_http_auth.py tests/adapters/test_http_errors.py \
	tests/adapters/test_bad_input.py tests/adapters/test_entrance.py tests/adapters/test_fast_path.py \
	tests/adapters/test_a2a.py tests/adapters/test_a2a_push.py tests/adapters/test_mcp_2025.py \
	tests/adapters/test_mcp_2026.py tests/adapters/test_limits_http.py tests/adapters/test_observability.py

.PHONY: test-cluster

test-cluster: install
	TEST_REDIS_CLUSTER=1 $(PY) -m pytest $(CLUSTER_TESTS) $(PYTEST_ARGS)
