# turnstile developer tasks. `make help` lists the targets.

GO                  ?= go
CACHE_DIR           := $(CURDIR)/.cache
BIN_DIR             := $(CACHE_DIR)/bin
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK         := $(BIN_DIR)/staticcheck-$(STATICCHECK_VERSION)
PKGS                ?= ./...
LOCKCORE            := lockcore
TEST_FLAGS          ?= -race -count=1 -timeout 15m
# The race detector slows code down several times: a test that passes only when slowed
# hides a defect (a loop without pauses, a bound that holds only at race speed). lockcore's
# tests, most of which count calls or bound waits, run once more without it.
NORACE_FLAGS        ?= -count=1 -timeout 15m
DEMO_FLAGS          ?=

.DEFAULT_GOAL := help
MAKEFLAGS     += --no-print-directory

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: engine-deps
engine-deps: ## Fetch DynamoDB Local into .cache/dynamodb-local (once; needs Java 17+ and Maven).
	@if [ -z "$$DYNAMODB_ENDPOINT" ]; then $(GO) run ./cmd/ddblocal fetch; fi

# The bench's AWS lock client baseline (issue #30): a Java peer (bench/awspeer: pom.xml and
# source) that cmd/bench builds into .cache/awspeer with Maven's dependency:copy-dependencies
# and javac, once per change of bench/awspeer. `make bench` builds it when needed and, if it
# cannot, runs without it and says why in its report; `make test` builds it first, so that
# the peer's smoke test (TestAWSLockClientPeer) does not spend its time on the first build.
.PHONY: awspeer
awspeer: ## Build the bench's AWS lock client peer into .cache/awspeer (once; needs a JDK 17+ and Maven).
	@$(GO) run ./cmd/bench -build-awspeer

.PHONY: engine
engine: ## Start a detached DynamoDB Local; the last line printed is DYNAMODB_ENDPOINT=...
	@$(GO) run ./cmd/ddblocal start

.PHONY: engine-stop
engine-stop: ## Stop the engine started by `make engine`.
	@$(GO) run ./cmd/ddblocal stop

.PHONY: lint
lint: $(STATICCHECK) ## go vet, staticcheck and gofmt (the application and the lockcore module).
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)
	cd $(LOCKCORE) && $(GO) vet ./... && $(STATICCHECK) ./...
	@unformatted=$$(git ls-files --cached --others --exclude-standard -- '*.go' | xargs -r gofmt -l); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi

$(STATICCHECK):
	@mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@mv $(BIN_DIR)/staticcheck $@

.PHONY: test
test: lint engine-deps awspeer sam-validate sam-build vuln ## Lint, SAM validate/build, govulncheck, all tests with -race, then a short fuzz smoke run.
	$(GO) test $(TEST_FLAGS) $(PKGS)
	@$(MAKE) test-lockcore
	@$(MAKE) fuzz FUZZTIME=$(FUZZ_SMOKE_TIME)

# lockcore is a module of its own (it depends on the AWS SDK only), so `go test ./...` in the
# application does not reach it, and its tests cannot use the application's harness: they
# run against the engine DYNAMODB_ENDPOINT names, which `ddblocal exec` starts (and stops)
# for them unless it is already set.
.PHONY: test-lockcore
# The two passes run side by side, each on an engine of its own: they spend most of their
# time waiting (leases, pacing), so together they take little longer than one. For the
# same reason the tests marked parallel run LOCKCORE_PARALLEL at a time, not go test's
# default of one per core (two here): 8 took the -race pass from about 490 s to 325 s.
LOCKCORE_PARALLEL ?= 8
test-lockcore: engine-deps ## The lockcore module's tests with -race and without it (side by side), each on an engine of its own.
	@mkdir -p $(BIN_DIR)
	@$(GO) build -o $(BIN_DIR)/ddblocal ./cmd/ddblocal
	@cd $(LOCKCORE) && log=$$(mktemp) && \
	  echo "test-lockcore: go test $(NORACE_FLAGS) -parallel $(LOCKCORE_PARALLEL) ./... (without -race) runs beside the -race pass; its output follows that pass" && \
	  { $(BIN_DIR)/ddblocal exec -- $(GO) test $(NORACE_FLAGS) -parallel $(LOCKCORE_PARALLEL) ./... >"$$log" 2>&1 & pid=$$!; } && \
	  echo "cd $(LOCKCORE) && go test $(TEST_FLAGS) -parallel $(LOCKCORE_PARALLEL) ./..." && \
	  $(BIN_DIR)/ddblocal exec -- $(GO) test $(TEST_FLAGS) -parallel $(LOCKCORE_PARALLEL) ./...; race=$$?; \
	  wait $$pid; norace=$$?; \
	  echo "test-lockcore: without -race:"; cat "$$log"; rm -f "$$log"; \
	  [ $$race -eq 0 ] && [ $$norace -eq 0 ]

# ---------------------------------------------------------------------------------------------
# Vulnerabilities (issue #13): govulncheck on the source (./...) and on the built bootstraps.
# The database is GOVULNDB (e.g. GOVULNDB=file:///path/to/db or https://vuln.go.dev) if set,
# else the offline copy ../shared/vulndb/govulndb.tgz (extracted into .cache/govulndb), else
# none: then the target says so loudly and exits 0 (nothing to check against is not a finding).
# ---------------------------------------------------------------------------------------------
GOVULNCHECK_VERSION ?= v1.9.0
GOVULNCHECK         := $(BIN_DIR)/govulncheck-$(GOVULNCHECK_VERSION)
VULNDB_ARCHIVE      ?= $(abspath $(CURDIR)/../shared/vulndb/govulndb.tgz)
VULNDB_DIR          := $(CACHE_DIR)/govulndb
VULN_BUILD_DIR      := $(CURDIR)/.aws-sam/build

$(GOVULNCHECK):
	@mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR) $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)
	@mv $(BIN_DIR)/govulncheck $@

.PHONY: vuln
vuln: $(GOVULNCHECK) ## govulncheck ./... and each bootstrap (-mode binary); GOVULNDB or ../shared/vulndb; fails on findings.
	@set -e; db="$$GOVULNDB"; \
	if [ -z "$$db" ] && [ -f "$(VULNDB_ARCHIVE)" ]; then \
	  if [ ! -f "$(VULNDB_DIR)/.extracted" ] || [ "$(VULNDB_ARCHIVE)" -nt "$(VULNDB_DIR)/.extracted" ]; then \
	    rm -rf "$(VULNDB_DIR)"; mkdir -p "$(VULNDB_DIR)"; \
	    tar -xzf "$(VULNDB_ARCHIVE)" -C "$(VULNDB_DIR)"; touch "$(VULNDB_DIR)/.extracted"; \
	  fi; \
	  db="file://$(VULNDB_DIR)"; \
	fi; \
	if [ -z "$$db" ]; then \
	  echo "################################################################################"; \
	  echo "vuln: NO VULNERABILITY DATABASE REACHABLE: GOVULNDB is not set and"; \
	  echo "vuln: $(VULNDB_ARCHIVE) does not exist. NOTHING WAS CHECKED."; \
	  echo "vuln: set GOVULNDB=file:///path/to/db (govulncheck -db layout) or GOVULNDB=https://vuln.go.dev"; \
	  echo "################################################################################"; \
	  exit 0; \
	fi; \
	modified=$$(case "$$db" in file://*) sed -n 's/.*"modified":"\([^"]*\)".*/\1/p' "$${db#file://}/index/db.json" 2>/dev/null;; esac); \
	echo "vuln: govulncheck $(GOVULNCHECK_VERSION), database $$db$${modified:+ (modified $$modified)}, $$($(GO) env GOVERSION)"; \
	echo "vuln: source ./..."; \
	$(GOVULNCHECK) -db "$$db" ./...; \
	for fn in $(LAMBDA_FUNCTIONS); do \
	  f="$(VULN_BUILD_DIR)/$$fn/bootstrap"; \
	  if [ ! -x "$$f" ] || [ -n "$$(find . -path ./.cache -prune -o -path ./.venv -prune -o \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$$f" -print | head -1)" ]; then \
	    echo "vuln: building $$f (missing or older than the source)"; \
	    $(MAKE) build-$$fn ARTIFACTS_DIR="$(VULN_BUILD_DIR)/$$fn" >/dev/null; \
	  fi; \
	  echo "vuln: binary $$f"; \
	  $(GOVULNCHECK) -db "$$db" -mode binary "$$f"; \
	done

# The playground (issue #29): live locks of every kind for `turnstile locks` on a fresh clone.
# It starts (or reuses) the engine of `make engine`, builds the tables from template.yaml and
# leaves a background holder process (.cache/playground/holders.{pid,log}) for
# PLAYGROUND_DURATION; the last lines printed say how to point the CLI at it.
PLAYGROUND_DURATION ?= 10m

.PHONY: playground
playground: ## Live locks of every kind on the local engine for the CLI (held, waiting, abandoned; PLAYGROUND_DURATION=10m); prints the exports.
	@mkdir -p $(BIN_DIR)
	@$(GO) build -o $(BIN_DIR)/playground ./cmd/playground
	@out=$$($(GO) run ./cmd/ddblocal start) || exit 1; echo "$$out"; \
	endpoint=$$(printf '%s\n' "$$out" | sed -n 's/^DYNAMODB_ENDPOINT=//p' | tail -n 1); \
	DYNAMODB_ENDPOINT="$$endpoint" $(BIN_DIR)/playground start -duration '$(PLAYGROUND_DURATION)'

.PHONY: playground-stop
playground-stop: ## Stop the playground's holders (their locks are released); the engine keeps running (make engine-stop).
	@$(GO) run ./cmd/playground stop

.PHONY: demo
demo: ## Run the demo against a fresh local engine (or DYNAMODB_ENDPOINT); flags via DEMO_FLAGS="-orders 500 -seed 2".
	$(GO) run ./cmd/demo $(DEMO_FLAGS)

.PHONY: demo-scale
demo-scale: ## Sweep: 300 orders at 12, 40, 100 with 4 and with 1 hot SKU (turnstile, naive, optimistic; legacy at 40); table, bench/demo-scale.json, bench/demo-scale.svg. Flags via DEMO_SCALE_FLAGS="-orders 100".
	$(GO) run ./cmd/demo -scale 12,40,100 -scale-hot 4,1 -legacy-at 40 -json bench/demo-scale.json -svg bench/demo-scale.svg $(DEMO_SCALE_FLAGS)

# ---------------------------------------------------------------------------------------------
# Benchmark (issue #6): cmd/bench writes bench/results.json, bench/RESULTS.md, bench/chart.svg.
#   make bench                        full run (20 s per hot-key run, 60 s per multi-key run, 4, 16 and 64 workers, about 30 minutes)
#   make bench QUICK=1                short runs, under 3 minutes
#   make bench DURATION=10s WORKERS=16 RTT=5ms STRATEGIES=mutex,queue
# STRATEGIES=all includes awslockclient, AWS's Java lock client (the peer of `make awspeer`,
# built on first use; hot-key runs only).
# ---------------------------------------------------------------------------------------------
DURATION   ?=
WORKERS    ?= 4,16,64
RTT        ?= 0,5ms
STRATEGIES ?= all
QUICK      ?=
BENCH_ARGS  = -workers '$(WORKERS)' -rtt '$(RTT)' -strategies '$(STRATEGIES)' \
              $(if $(DURATION),-duration '$(DURATION)') $(if $(filter-out 0,$(QUICK)),-quick)
BENCH_CMD   = make bench$(if $(filter-out 0,$(QUICK)), QUICK=$(QUICK))$(if $(DURATION), DURATION=$(DURATION))$(if \
              $(filter-out 4$(comma)16$(comma)64,$(WORKERS)), WORKERS=$(WORKERS))$(if $(filter-out 0$(comma)5ms,$(RTT)), RTT=$(RTT))$(if \
              $(filter-out all,$(STRATEGIES)), STRATEGIES=$(STRATEGIES))
comma      := ,

.PHONY: bench
bench: engine-deps ## Benchmark the lock strategies (QUICK=1, DURATION, WORKERS, RTT, STRATEGIES); writes bench/.
	$(GO) run ./cmd/bench $(BENCH_ARGS) -command '$(BENCH_CMD)'

# ---------------------------------------------------------------------------------------------
# Reliability (issue #7): chaos run and fuzzing.
#   make chaos                                   10 minutes, all fault kinds, crashes, pauses, skew
#   make chaos DURATION=2m WORKERS=2 SEED=42 FAULTS='none,throttling=0.05' CHAOS_FLAGS='-skew=false'
#   make chaos CHAOS_FLAGS='-think=0 -burst-every=0'   closed loop: no think time, no idle bursts
#   make fuzz FUZZTIME=2m                        every fuzz target of the module, FUZZTIME each
# DURATION and WORKERS are shared with the benchmark, which defines them above; chaos has its own
# defaults (10m, 3 per strategy) unless they are given on the command line or in the environment.
# ---------------------------------------------------------------------------------------------
SEED        ?= 0
FAULTS      ?= all
CHAOS_FLAGS ?=
FUZZTIME    ?= 1m
# The smoke run in `make test` counts executions rather than time: with a duration, Go's fuzz
# coordinator (go1.26) can fail a target with a bare "context deadline exceeded" when the time
# is up while a worker is mid-call (golang/go#75804, fixed in go1.27) — seen in a fresh-clone
# make test on FuzzDecodeAdjustment, no crasher written. A count has no deadline to race.
FUZZ_SMOKE_TIME ?= 5000x
CHAOS_DURATION = $(or $(if $(filter file undefined,$(origin DURATION)),,$(DURATION)),10m)
CHAOS_WORKERS  = $(or $(if $(filter file undefined,$(origin WORKERS)),,$(WORKERS)),3)

.PHONY: chaos
chaos: engine-deps ## Chaos run through the fault proxy (DURATION=10m WORKERS=3 SEED FAULTS=all); writes chaos-report.json, fails unless ok.
	@mkdir -p $(BIN_DIR)
	$(GO) build -o $(BIN_DIR)/chaos ./cmd/chaos
	$(BIN_DIR)/chaos -v -duration '$(CHAOS_DURATION)' -workers '$(CHAOS_WORKERS)' -seed '$(SEED)' -faults '$(FAULTS)' $(CHAOS_FLAGS)

# The deterministic simulator (lockcore/sim_test.go, docs/protocol.md section 6): SEEDS seeds
# from SIM_FIRST, split into SIM_PROCS equal ranges, one test process each. It needs no engine
# (lockcore's TestMain wants DYNAMODB_ENDPOINT set: "unused"). A failing range stops at its
# first failing seed and prints it with its last events and the command that replays it.
SEEDS     ?= 100000
SIM_FIRST ?= 1
SIM_PROCS ?= 2

.PHONY: sim
sim: ## The lockcore simulator: SEEDS seeds from SIM_FIRST in SIM_PROCS processes; prints a failing seed and its replay command.
	@mkdir -p $(BIN_DIR)
	@cd $(LOCKCORE) && $(GO) test -c -o $(BIN_DIR)/lockcore-sim.test .
	@chunk=$$(( ($(SEEDS) + $(SIM_PROCS) - 1) / $(SIM_PROCS) )); last=$$(( $(SIM_FIRST) + $(SEEDS) )); \
	logs=$$(mktemp -d); pids=""; \
	for i in $$(seq 0 $$(( $(SIM_PROCS) - 1 ))); do \
	  first=$$(( $(SIM_FIRST) + i * chunk )); n=$$(( last - first < chunk ? last - first : chunk )); \
	  [ $$n -gt 0 ] || continue; \
	  echo "sim: seeds $$first..$$(( first + n - 1 ))"; \
	  (cd $(LOCKCORE) && DYNAMODB_ENDPOINT=unused $(BIN_DIR)/lockcore-sim.test -test.run '^TestSim$$' -test.timeout 0 \
	    -sim.first=$$first -sim.seeds=$$n >$$logs/$$i 2>&1) & pids="$$pids $$!"; \
	done; \
	fail=0; for p in $$pids; do wait $$p || fail=1; done; \
	if [ $$fail -ne 0 ]; then cat $$logs/*; grep -h '^replay:\|replay: ' $$logs/* | sed 's/^ *//'; rm -rf $$logs; exit 1; fi; \
	rm -rf $$logs; echo "sim: $(SEEDS) seeds from $(SIM_FIRST): no invariant violated"

# Fuzz targets need no engine: DYNAMODB_ENDPOINT=unused keeps testenv.Main from starting one.
.PHONY: fuzz
fuzz: ## Run every fuzz target (func Fuzz* in *_test.go) for FUZZTIME each (default 1m).
	@set -e; for dir in $$(git ls-files --cached --others --exclude-standard -- '*_test.go' | xargs -r grep -l '^func Fuzz' | xargs -r -n1 dirname | sort -u); do \
	  for fn in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go | sed 's/^func //' | sort -u); do \
	    echo "fuzz: ./$$dir $$fn for $(FUZZTIME)"; \
	    mod=.; pkg=./$$dir; case "$$dir" in $(LOCKCORE)|$(LOCKCORE)/*) mod=$(LOCKCORE); pkg=./$${dir#$(LOCKCORE)}; pkg=$${pkg%/};; esac; \
	    (cd $$mod && DYNAMODB_ENDPOINT=$${DYNAMODB_ENDPOINT:-unused} $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg); \
	  done; \
	done

# ---------------------------------------------------------------------------------------------
# SAM application: template.yaml + samconfig.toml (section owned by the SAM/functions work)
#
# `sam build` runs `make build-<LogicalId>` for every function (Metadata BuildMethod makefile,
# CodeUri "."); samconfig.toml sets build_in_source, so make runs here, in the module root,
# with ARTIFACTS_DIR pointing into .aws-sam/build/<LogicalId>.
# ---------------------------------------------------------------------------------------------
SAM_CLI_VERSION  ?= 1.170.0
PYTHON           ?= python3
VENV             := $(CURDIR)/.venv
SAM              := $(VENV)/bin/sam
SAM_STAMP        := $(VENV)/.aws-sam-cli-$(SAM_CLI_VERSION)
SAM_RUN          := SAM_CLI_TELEMETRY=0 $(SAM)
SAM_REGION       ?= us-east-1
LAMBDA_FUNCTIONS := OrderProcessorFunction InventoryUpdaterFunction JanitorFunction
# -w drops DWARF; the symbol table stays, so govulncheck -mode binary (and AWS Inspector) can tell
# which vulnerable symbols a bootstrap really contains (a stripped one reports whole modules).
GO_LAMBDA_BUILD   = GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags '-w'
# Where build-<LogicalId> puts bootstrap when run by hand (sam build sets ARTIFACTS_DIR).
ARTIFACTS_DIR    ?= $(CURDIR)/bin/lambda/$(@:build-%=%)

# ENV picks the samconfig.toml environment (default, prod). Shells export ENV for their own
# use, so from the environment only those names count; on the command line anything does.
ifeq ($(origin ENV),command line)
SAM_CONFIG_ENV := $(ENV)
else
SAM_CONFIG_ENV := $(if $(filter default prod,$(ENV)),$(ENV),default)
endif

.PHONY: sam-tools
sam-tools: $(SAM_STAMP) ## Install the pinned SAM CLI into .venv (once).

$(SAM_STAMP):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check "aws-sam-cli==$(SAM_CLI_VERSION)"
	@$(SAM) --version
	@touch $@

.PHONY: sam-validate
sam-validate: sam-tools ## sam validate --lint (SAM translation + cfn-lint) on template.yaml.
	$(SAM_RUN) validate --lint --region $(SAM_REGION) --config-env $(SAM_CONFIG_ENV)

.PHONY: sam-build
sam-build: sam-tools ## sam build (make build-<LogicalId> in place), then check every bootstrap is an arm64 ELF.
	$(SAM_RUN) build --config-env $(SAM_CONFIG_ENV)
	@for fn in $(LAMBDA_FUNCTIONS); do \
	  f=.aws-sam/build/$$fn/bootstrap; \
	  [ -x "$$f" ] || { echo "sam-build: $$f missing or not executable"; exit 1; }; \
	  hdr=$$(od -An -tx1 -N20 "$$f" | tr -d ' \n'); \
	  case "$$hdr" in 7f454c4602*) ;; *) echo "sam-build: $$f is not a 64-bit ELF"; exit 1;; esac; \
	  mach=$$(printf '%s' "$$hdr" | cut -c37-40); \
	  [ "$$mach" = "b700" ] || { echo "sam-build: $$f ELF machine $$mach, want b700 (aarch64)"; exit 1; }; \
	  echo "sam-build: $$f: ELF 64-bit aarch64"; \
	done

.PHONY: build
build: sam-build ## Build every function for Lambda (sam build).

.PHONY: build-OrderProcessorFunction build-InventoryUpdaterFunction build-JanitorFunction
build-OrderProcessorFunction: ## Build the order processor's bootstrap into $(ARTIFACTS_DIR).
	$(GO_LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/orderprocessor

build-InventoryUpdaterFunction: ## Build the inventory updater's bootstrap into $(ARTIFACTS_DIR).
	$(GO_LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/inventoryupdater

build-JanitorFunction: ## Build the janitor's bootstrap into $(ARTIFACTS_DIR).
	$(GO_LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/janitor

# make invoke FN=... EVENT=... [SEED=events/seed-inventory.json] [ENV_VARS=env.json] [LOG_LEVEL=debug] [FORCE=1]
FORCE     ?=
ENV_VARS  ?=
LOG_LEVEL ?=
# SEED is shared with `make chaos` (a number there): here it counts when it names a .json file.
INVOKE_ARGS = $(if $(filter %.json,$(SEED)),-seed '$(SEED)') $(if $(ENV_VARS),-env-vars '$(ENV_VARS)') \
              $(if $(LOG_LEVEL),-log-level '$(LOG_LEVEL)') $(if $(filter-out 0,$(FORCE)),-force)

.PHONY: invoke
invoke: ## Run a function locally: make invoke FN=OrderProcessorFunction EVENT=events/sqs-order.json [SEED= ENV_VARS= LOG_LEVEL= FORCE=1]
	@[ -n "$(FN)" ] && [ -n "$(EVENT)" ] || { echo "usage: make invoke FN=<LogicalId> EVENT=events/<file>.json [SEED=events/seed-inventory.json] [ENV_VARS=env.json] [LOG_LEVEL=debug] [FORCE=1]"; exit 2; }
	@$(MAKE) invoke-tool
	@$(BIN_DIR)/invoke -fn '$(FN)' -event '$(EVENT)' $(INVOKE_ARGS) # fetches and starts DynamoDB Local unless DYNAMODB_ENDPOINT is set

.PHONY: local-tables
local-tables: ## Create the template's tables (stage local) at DYNAMODB_ENDPOINT for sam local invoke (docs/local-invoke.md) [SEED=events/seed-inventory.json]
	@[ -n "$$DYNAMODB_ENDPOINT" ] || { echo "usage: DYNAMODB_ENDPOINT=http://127.0.0.1:8000 make local-tables [SEED=events/seed-inventory.json]"; exit 2; }
	@$(MAKE) invoke-tool
	@$(BIN_DIR)/invoke -tables $(if $(filter %.json,$(SEED)),-seed '$(SEED)')

# cmd/invoke itself; its first build compiles the AWS SDK, minutes without output, so say so.
.PHONY: invoke-tool
invoke-tool:
	@mkdir -p $(BIN_DIR)
	@[ -x $(BIN_DIR)/invoke ] || echo "invoke: building ./cmd/invoke (the first build compiles the AWS SDK: a few minutes)"
	@$(GO) build -o $(BIN_DIR)/invoke ./cmd/invoke

.PHONY: deploy
deploy: sam-build ## sam deploy --config-env $(ENV) (ENV=default|prod; needs AWS credentials).
	$(SAM_RUN) deploy --config-env $(SAM_CONFIG_ENV)
