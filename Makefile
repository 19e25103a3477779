# turnstile developer tasks. `make help` lists the targets.

GO                  ?= go
CACHE_DIR           := $(CURDIR)/.cache
BIN_DIR             := $(CACHE_DIR)/bin
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK         := $(BIN_DIR)/staticcheck-$(STATICCHECK_VERSION)
PKGS                ?= ./...
TEST_FLAGS          ?= -race -count=1 -timeout 15m

.DEFAULT_GOAL := help
MAKEFLAGS     += --no-print-directory

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: engine-deps
engine-deps: ## Fetch DynamoDB Local into .cache/dynamodb-local (once; needs Java 17+ and Maven).
	@if [ -z "$$DYNAMODB_ENDPOINT" ]; then $(GO) run ./cmd/ddblocal fetch; fi

.PHONY: engine
engine: ## Start a detached DynamoDB Local; the last line printed is DYNAMODB_ENDPOINT=...
	@$(GO) run ./cmd/ddblocal start

.PHONY: engine-stop
engine-stop: ## Stop the engine started by `make engine`.
	@$(GO) run ./cmd/ddblocal stop

.PHONY: lint
lint: $(STATICCHECK) ## go vet, staticcheck and gofmt.
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)
	@unformatted=$$(git ls-files --cached --others --exclude-standard -- '*.go' | xargs -r gofmt -l); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi

$(STATICCHECK):
	@mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@mv $(BIN_DIR)/staticcheck $@

.PHONY: test
test: lint engine-deps ## Lint, then run all tests with -race (each test binary starts its engine unless DYNAMODB_ENDPOINT is set).
	$(GO) test $(TEST_FLAGS) $(PKGS)

.PHONY: demo
demo: ## Run the demo against a fresh local engine (or DYNAMODB_ENDPOINT).
	$(GO) run ./cmd/demo

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
GO_LAMBDA_BUILD   = GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags '-s -w'
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

.PHONY: invoke
invoke: ## Run a function locally: make invoke FN=OrderProcessorFunction EVENT=events/sqs-order.json
	@[ -n "$(FN)" ] && [ -n "$(EVENT)" ] || { echo "usage: make invoke FN=<LogicalId> EVENT=events/<file>.json"; exit 2; }
	@mkdir -p $(BIN_DIR)
	@$(GO) build -o $(BIN_DIR)/invoke ./cmd/invoke
	@$(BIN_DIR)/invoke -fn '$(FN)' -event '$(EVENT)' # fetches and starts DynamoDB Local unless DYNAMODB_ENDPOINT is set

.PHONY: deploy
deploy: sam-build ## sam deploy --config-env $(ENV) (ENV=default|prod; needs AWS credentials).
	$(SAM_RUN) deploy --config-env $(SAM_CONFIG_ENV)
