# lmlite — see README.md. `make run` builds and serves a demo; `make test` is what CI runs.
GO        ?= go
BIN       := bin/lmlite
DATA      ?= data
# Each fuzz target's run in `make test` (54 targets: 5 s each put a clean-clone CI at
# 21.4 min on 2 cores, past its 20); `make fuzz FUZZTIME=1m` for a longer run.
FUZZTIME  ?= 3s
# The per-type block decoders' targets (FuzzDecode*, one per quantization type, all the
# same harness) each get a shorter run.
FUZZTIME_DECODE ?= 2s
SHELL     := /bin/bash
# go-nvml (engine/device) compiles NVIDIA's nvml.h through cgo, and every deprecated
# NVML function it wraps makes gcc print a warning: ~150 lines on a clean build that
# look like a failure. go-nvml has no other way to build (it needs the header for its
# cgo calls), and a dependency's #cgo lines cannot be changed, so every make target
# builds with this flag; `go build` without make: CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations".
# (filter-out: a recursive $(MAKE) gets it once, not twice.)
export CGO_CFLAGS := $(filter-out -Wno-deprecated-declarations,$(or $(CGO_CFLAGS),-O2 -g)) -Wno-deprecated-declarations

.PHONY: build test test-short test-fresh-clone stress-lifecycle fuzz run bench bench-gateway vet clean smoke-agent-clis

# -buildvcs=auto stamps the commit into the binary (`lmlite version`) when built in a
# git checkout, whatever GOFLAGS says.
build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/lmlite

# The full suite: vet, every test with the race detector, the memory and allocation
# measurements (meaningless under the race detector) and the numerics-only tests that
# skip under it (testenv.Race: llama.cpp parity, every generated type) without it, the kernels and
# the model on the pure-Go reference kernels (-tags purego; parity with llama.cpp ran
# on the SIMD kernels, which equal the reference bit for bit), then each fuzz target
# briefly. TestFreshCloneMakeRun (in the -race run) clones this checkout and runs `make run`
# in it with the shared build cache, the clone at the same path on every run (from any
# checkout: the build cache keys a package on its directory, so only the packages changed
# since the last run compile); test-fresh-clone runs it with an empty one, as on a
# new machine (7 min to ready measured on a loaded 2-core machine: not in `make test`).
# The Redis suites run with leases (redis: {leases: true}, the default); the second line
# runs them again on the per-request path (leases: false, LMLITE_TEST_LEASES=0).
# The tests without the race detector run in one `go test` (its packages two at a time:
# RSS, allocation counts and numerics are each process's own), but TestHostileTenants,
# which measures latency, runs alone.
# GORACE=atexit_sleep_ms=0: a race-built process sleeps 1 s at exit by default (the
# race detector's grace for goroutines still running to report), and the -race run
# has 42 test binaries and the child processes their tests start and wait for (26
# --help runs, servers and workers stopped, batch and pull children): a gateway test
# binary that runs no test took 1.7 s with the sleep, 0.7 s without;
# TestEveryCommandHasHelp 14 s and 5 s (3 ABAB pairs each, load 32). Every access the
# tests make while they run is still checked; a GORACE you set comes after and wins.
test: vet
	GORACE="atexit_sleep_ms=0 $$GORACE" $(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) stress-lifecycle STRESS_COUNT=$(STRESS_COUNT_TEST) STRESS_REDIS_COUNT=0
	LMLITE_TEST_LEASES=0 $(GO) test -count=1 -run 'TestRedis' ./tenancy ./gateway
	$(GO) test -count=1 -run 'TestThreeModelsMemory|TestParityWithLlamaCpp|TestGenerateLoadsAndRuns|TestZooQuantizeParity|TestKernelsDoNotAllocate|TestDecodeAllocations' \
	  ./engine ./engine/model ./engine/genmodel ./engine/kernels
	$(GO) test -count=1 -run 'TestHostileTenants' ./cmd/lmlite
	$(GO) test -count=1 -tags purego -skip 'TestParityWithLlamaCpp' ./engine/kernels ./engine/model
	$(MAKE) fuzz

# The engine's lifecycle tests under -race, STRESS_COUNT times each (issue 36's loop:
# 200): the traces of decide and of the janitor's message handlers, and the Block-level
# tests whose goroutines send the janitor its messages at once (loads racing unloads
# and Close, idle expiry, preemption, a burst on an unloaded model); then
# STRESS_REDIS_COUNT times (default STRESS_COUNT; 0: not) the ones of two Blocks
# sharing a real redis-server's leases (preemption across processes; about 7 s a
# round, each waiting for lease beats). `make test` runs the first
# STRESS_COUNT_TEST times after the -race suite (its bounded form: 16 s at load 31).
LIFECYCLE_TESTS := TestJanitorProtocol|TestLifecycleTrace|TestLeases|TestBlockIdleUnloadAndReload|TestBlockLoadAfterClose|TestBlockCloseDuringLoad|TestBurstOnUnloadedModelLoadsOnce|TestBlockLifecycleMessagesRace
LIFECYCLE_REDIS_TESTS := TestRedisHigherPriorityLoadUnloadsIdleModelOfOtherProcess|TestRedisTwoBlocksNeverExceedBudget|TestRedisKilledHolderLeaseExpires|TestRedisLeaseHolderProcess|TestRedisLostLeaseAcquiredAgain|TestRedisCloseDuringPreemptionRefusesTheLoad
STRESS_COUNT ?= 200
STRESS_REDIS_COUNT ?= $(STRESS_COUNT)
STRESS_COUNT_TEST ?= 5
stress-lifecycle:
	GORACE="atexit_sleep_ms=0 $$GORACE" $(GO) test -race -count=$(STRESS_COUNT) -timeout 60m -run '^($(LIFECYCLE_TESTS))$$' ./engine
	if [ "$(STRESS_REDIS_COUNT)" -gt 0 ]; then \
	  GORACE="atexit_sleep_ms=0 $$GORACE" $(GO) test -race -count=$(STRESS_REDIS_COUNT) -timeout 60m -run '^($(LIFECYCLE_REDIS_TESTS))$$' ./engine; fi

test-fresh-clone:
	LMLITE_FRESH_CLONE=1 $(GO) test -count=1 -run 'TestFreshCloneMakeRun' -v -timeout 45m ./cmd/lmlite

test-short:
	$(GO) test -short -count=1 ./...

vet:
	$(GO) vet ./...
	# macOS on Apple silicon: the portable (purego) paths and the non-Linux process code compile
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) vet ./...

# Each fuzz target runs for $(FUZZTIME) ($(FUZZTIME_DECODE) for FuzzDecode*), one at a time.
# Each package's instrumented test binary is built once (`go test -c -fuzz=.`: the -fuzz
# pattern only switches on the coverage instrumentation, the same for every target) and run
# from the package's directory once per target with what `go test -fuzz` passes it (the
# shared fuzz cache, testdata/fuzz read and failing inputs written as by `go test`): a
# `go test -fuzz` per target relinked the package each time (kernels, a 2 s target: 14 s
# against 3.3 s at load 34, 4.0 s against 3.1 s at load 7 on the shared 2-core machine).
# A run that fails with nothing but "context deadline exceeded" (no failing input written)
# is Go's fuzz-coordinator race at the end of -fuzztime (golang/go#75804, fixed in Go
# 1.27) and is run once more; any other failure fails at once.
fuzz:
	@set -e -o pipefail; tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; log=$$tmp/log; \
	cache=$$($(GO) env GOCACHE)/fuzz; \
	for dir in $$(grep -rlE '^func Fuzz[A-Za-z0-9_]+\(' --include='*_test.go' . | xargs -n1 dirname | sort -u); do \
	  ip=$$($(GO) list $$dir); bin=$$tmp/$$(echo $$ip | tr / _).test; \
	  echo "fuzz: building $$ip"; $(GO) test -c -fuzz=. -o $$bin $$dir; \
	  for t in $$(grep -hoE '^func (Fuzz[A-Za-z0-9_]+)\(' $$dir/*_test.go | sed 's/func //; s/(//' | sort -u); do \
	    ft=$(FUZZTIME); case $$t in FuzzDecode*) ft=$(FUZZTIME_DECODE);; esac; \
	    echo "fuzz $$dir $$t ($$ft)"; \
	    run() { (cd $$dir && $$bin -test.paniconexit0 -test.timeout=10m -test.run='^$$' -test.fuzz="^$$t$$" \
	      -test.fuzztime=$$ft -test.fuzzcachedir=$$cache/$$ip); }; \
	    if ! run 2>&1 | tee $$log; then \
	      if grep -q 'context deadline exceeded' $$log && ! grep -qE 'Failing input written|panic:|_test.go:[0-9]+:' $$log; then \
	        echo "fuzz $$dir $$t: the fuzztime deadline race (golang/go#75804); running it again"; \
	        run; \
	      else exit 1; fi; \
	    fi; \
	  done; \
	done

# Serves the OpenAI-compatible API on $(LISTEN) with the embedded demo config: the demo
# models are written into data/ on the first run (demo-stories, a real model, and two
# with random weights), and the demo and admin keys are printed.
# `make run LISTEN=127.0.0.1:9090` serves elsewhere.
LISTEN ?= 127.0.0.1:8080
run: build
	./$(BIN) serve --listen $(LISTEN)

# The real agent CLIs against a real server, once each (opt-in, not in `make test`:
# about 800 MB of CLIs, installed pinned outside the repository by
# scripts/agentclis/setup.sh, and minutes of prefill for Claude Code's first prompt):
# Claude Code 2.1.332 (`claude -p`, /v1/messages) and Codex 0.171.0 (`codex exec`,
# /v1/responses) on a generated model with random weights.
smoke-agent-clis:
	LMLITE_AGENT_CLIS=1 $(GO) test -count=1 -timeout 30m -v -run '^TestAgentCLIsSmoke$$' ./cmd/lmlite

bench: build
	@mkdir -p $(DATA)
	@[ -f $(DATA)/bench-125m-q4_k_m.gguf ] || ./$(BIN) gen-model --arch llama --preset 125m --type q4_k_m --seed 1 --out $(DATA)/bench-125m-q4_k_m.gguf
	./$(BIN) bench --model $(DATA)/bench-125m-q4_k_m.gguf --threads 2

# The gateway's overhead (docs/PERFORMANCE.md, issue 6): an instant fake upstream, the
# gateway in front of it and a bare fasthttp proxy as the floor, ABAB at 1 and 16
# connections (and 64: saturation); then 1-token completions on a generated tiny model through the whole
# gateway. GWBENCH_FLAGS adds flags (see `bin/gwbench -h`), e.g. --cpuprofile FILE.
GWBENCH_FLAGS ?=
# The wire formats the third run alternates (ABAB…) on the embedded path; each one's
# req/s is reported against the first's (issue 31: responses, not stored and stored
# (OpenAI's default), and messages vs chat).
GWBENCH_ENDPOINTS ?= chat,responses,messages,responses-stored

bench-gateway: build
	$(GO) build -o bin/gwbench ./gateway/internal/gwbench
	./bin/gwbench --lmlite $(BIN) --conns 1,16,64 --pairs 3 --duration 5s --bare $(GWBENCH_FLAGS)
	./bin/gwbench --lmlite $(BIN) --embedded --conns 1,16 --pairs 3 --duration 5s $(GWBENCH_FLAGS)
	./bin/gwbench --lmlite $(BIN) --embedded --conns 1,16 --pairs 3 --duration 5s --endpoint $(GWBENCH_ENDPOINTS) $(GWBENCH_FLAGS)

clean:
	rm -rf bin
