# `make soak` (full: 10,000 jobs, every fault kind 6 times, about 30 minutes on 2 cores) and `make soak QUICK=1`
# (300 jobs, every fault kind once, under 3 minutes; `make test` runs it). `SEED=n` replays a run's fault
# schedule and job mix; `SOAK_ARGS` passes more options (`--supervise always`, `--jobs N`, `--keep`).
# The clock fault needs Debian's libfaketime, installed here when missing.
QUICK ?=
SEED ?=
SOAK_ARGS ?=

.PHONY: soak soak-deps

soak: install soak-deps
	$(PY) -m soak $(if $(QUICK),--quick) $(if $(SEED),--seed $(SEED)) $(SOAK_ARGS)

soak-deps:
	@dpkg -s libfaketime >/dev/null 2>&1 || { command -v apt-get >/dev/null && \
		(apt-get update -qq && apt-get install -y -qq libfaketime) >/dev/null; } || \
		{ echo "soak: libfaketime is needed (apt-get install libfaketime)"; exit 1; }

TEST_DEPS += soak-deps
