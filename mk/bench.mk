# `make bench` (full run, about 30 minutes on 2 cores) and `make bench QUICK=1` (a smoke run, under a minute).
# It starts its own Redis, gunicorn and workers; the load generator is wrk (Debian's package). The
# fastmcp baseline server needs fastmcp + fastmcp-tasks 4.1.4, which cannot share the product's
# environment, so it gets its own, built once: rebuilt only when its pins (`BENCH_PINS`) change. The A2A
# baseline (a2a-sdk 1.3.0 under uvicorn workers, with its database task store on PostgreSQL, which the bench starts
# from Debian's `postgresql` package, and with its in-memory store) lives there too.
BENCH_VENV ?= .venv-bench
BENCH_PINS := bench/baselines/requirements.txt
QUICK ?=
BENCH_ARGS ?=

.PHONY: bench bench-deps bench-hostile bench-instructions bench-web-instructions bench-revisions bench-scaling bench-schedules bench-tracing valgrind-deps

bench: install bench-deps
	$(PY) -m bench.run $(if $(QUICK),--quick) $(BENCH_ARGS)

# Polls idle, with 1,000 event streams held open and with 200 sockets dribbling headers (about a minute).
bench-hostile: install
	@command -v wrk >/dev/null || { echo "bench: wrk is needed (apt-get install wrk)"; exit 1; }
	$(PY) -m bench.hostile $(BENCH_ARGS)

# No-op jobs/s with 1, 2 and 4 worker processes against bare Celery, on Redis and on RabbitMQ (about 5 minutes;
# QUICK=1 about 90 s). Not part of `make bench`: it would add a third to its time.
bench-scaling: install rabbitmq
	$(PY) -m bench.scaling $(if $(QUICK),--quick) $(BENCH_ARGS)

bench-deps: $(BENCH_VENV)/.installed
	@command -v wrk >/dev/null || { command -v apt-get >/dev/null && \
		(apt-get update -qq && apt-get install -y -qq wrk) >/dev/null; } || \
		{ echo "bench: wrk is needed (apt-get install wrk)"; exit 1; }
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		{ command -v apt-get >/dev/null && (apt-get update -qq && apt-get install -y -qq postgresql) >/dev/null; } || \
		{ echo "bench: PostgreSQL is needed (apt-get install postgresql)"; exit 1; }

$(BENCH_VENV)/.installed: $(BENCH_PINS)
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install -q -r $(BENCH_PINS)
	touch $@

# 10,000 schedules of everySeconds 60 ticked by two sweepers for 3 minutes: duplicates, missed ticks, tick
# lateness p99 (targets 0, 0, <= 1 s); QUICK=1: 1,000 schedules for 30 s.
bench-schedules: install
	$(PY) -m bench.schedules $(if $(QUICK),--quick) $(BENCH_ARGS)

# Two revisions side by side in one run, every row NEW / OLD (about 13 minutes; QUICK=1 about a minute): OLD=<commit>,
# NEW=<commit> or this checkout as it is. Each revision is a worktree under bench/.trees, installed once.
OLD ?=
NEW ?=
bench-revisions: install bench-deps
	@test -n "$(OLD)" || { echo "bench-revisions: name the revision to compare against: OLD=<commit>"; exit 1; }
	$(PY) -m bench.revisions $(OLD) $(NEW) $(if $(QUICK),--quick) $(BENCH_ARGS)

# Submits and polls with traces on (every request sampled, exported to an OTLP receiver on loopback) against off,
# side by side (about 2 minutes; QUICK=1 under a minute): the traced submit keeps >= 0.8x.
bench-tracing: install bench-deps
	$(PY) -m bench.tracing $(if $(QUICK),--quick) $(BENCH_ARGS)

# Redis's instructions per submit, counted by valgrind's callgrind (about 2 minutes): the figure a change to the
# submit's scripts is judged by (`bench/submit_instructions.py`). Its test needs valgrind too.
bench-instructions: install valgrind-deps
	$(PY) -m bench.submit_instructions $(BENCH_ARGS)

# A web worker's instructions per request on each side of the dispatch row, counted by callgrind (about 80 s):
# what a change to the web's Python path is judged by (`bench/web_instructions.py`).
bench-web-instructions: install valgrind-deps
	$(PY) -m bench.web_instructions $(BENCH_ARGS)

valgrind-deps:
	@command -v callgrind_control >/dev/null || { command -v apt-get >/dev/null && \
		(apt-get update -qq && apt-get install -y -qq valgrind) >/dev/null; } || \
		{ echo "bench: valgrind is needed (apt-get install valgrind)"; exit 1; }

TEST_DEPS += valgrind-deps
