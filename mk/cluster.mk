# `make test-cluster` (about 17 minutes on 2 cores): the service's test suite with the job store on a
# three-primary Redis Cluster started on loopback ports for the run (stopped after it) and an embedded Redis as
# the Celery broker. `make test` keeps a representative part: tests/tasks_backend/store/test_cluster.py (a cluster of
# its own) and test_cluster_slots.py (every script and transaction in one slot, on one Redis).
# Left out here: the suites that test other programs against the API rather than the store (JS and MCP
# clients, the MCP conformance suite, the browser, the fuzzers), and test_redis_down.py, whose unreachable
# and stalled Redis are addresses of its own (test_cluster.py has the cluster's own outage).
# Tests whose premise is one Redis (the broker in the store's own Redis, a relay in front of the store) run on
# the plain Redis even here (`tests.conftest.single_redis`).
CLUSTER_TESTS ?= tests/tasks_backend tests/workers \
	tests/adapters/http/test_http_jobs.py tests/adapters/http/test_http_auth.py tests/adapters/http/test_http_errors.py \
	tests/adapters/test_bad_input.py tests/adapters/test_entrance.py tests/adapters/test_fast_path.py \
	tests/adapters/a2a/test_a2a.py tests/adapters/a2a/test_a2a_push.py tests/adapters/a2a/test_a2a_spec.py \
	tests/adapters/mcp/test_mcp_2025.py tests/adapters/mcp/test_mcp_2026.py tests/adapters/test_limits_http.py \
	tests/adapters/test_observability.py tests/adapters/ui/test_ui_forms.py

.PHONY: test-cluster

# The MCP peer tests (tests/tasks_backend/remote/) run the fastmcp server from its own venv.
test-cluster: install mcp-clients
	TEST_REDIS_CLUSTER=1 $(PY) -m pytest $(CLUSTER_TESTS) $(PYTEST_ARGS)
