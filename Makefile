# outboxd: run `make` for the list of targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash

GO            ?= go
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
STRIPE_MOCK   := github.com/stripe/stripe-mock@v0.203.0
TOOLS         := $(CURDIR)/.tools
DATABASE_URL  ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
export DATABASE_URL
# outboxd version prints this; go install ...@vX.Y.Z records the tag instead.
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS       := -X github.com/outboxkit/outbox/cmd/outboxd/internal/cli.version=$(VERSION)
CHAOS_DURATION ?= 5m
# The bench's peers that bring their own dependencies (Watermill, DBOS) are
# compiled only with this tag, so the outboxd a user installs links none of
# them; make bench and make test set it.
BENCH_TAGS    := benchpeers
# The Stripe adapter's requests are checked against Stripe's OpenAPI spec.
export STRIPE_MOCK_BIN ?= $(TOOLS)/stripe-mock

.PHONY: help
help: ## list the targets
	@grep -E '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

.PHONY: demo
demo: build db-check ## run the whole pipeline end to end against local provider doubles (builds bin/outboxd first)
	bin/outboxd demo

.PHONY: example
example: db-check ## the NoteCreated example service end to end on RabbitMQ (AMQP_URL) and PostgreSQL
	$(GO) run ./cmd/notes

.PHONY: screenshot
screenshot: chromium db-check ## refresh docs/dashboard.png from the dashboard's browser test
	UPDATE_SCREENSHOT=1 $(GO) test -count=1 -run TestDashboardInABrowser ./adminhttp

.PHONY: test
test: lint db-check $(TOOLS)/stripe-mock chromium pgbouncer ## vet, staticcheck, gofmt, then every test with the race detector
	$(GO) test -race -count=1 -timeout 12m -tags $(BENCH_TAGS) ./...

.PHONY: test/race
test/race: test ## alias of test: the suite always runs with -race

.PHONY: test/short
test/short: db-check $(TOOLS)/stripe-mock ## every test, without the race detector (faster)
	$(GO) test -count=1 -timeout 10m -tags $(BENCH_TAGS) ./...

BENCH_OUT ?= docs/benchmarks.md

.PHONY: bench
bench: db-check pgbouncer ## throughput, latency and memory against baselines and peers from the same run: one table, also written to docs/benchmarks.md
	$(GO) build -tags $(BENCH_TAGS) -ldflags "$(LDFLAGS)" -o bin/outboxd-bench ./cmd/outboxd
	bin/outboxd-bench bench --out $(BENCH_OUT)

.PHONY: chaos
chaos: build db-check ## soak the multi-process chaos suite for CHAOS_DURATION (default 5m): killed dispatchers, killed connections, faulty providers
	bin/outboxd chaos --duration $(CHAOS_DURATION)

.PHONY: lint
lint: $(TOOLS)/staticcheck ## gofmt check, go vet and staticcheck
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags $(BENCH_TAGS) ./...
	$(TOOLS)/staticcheck -tags $(BENCH_TAGS) ./...

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install $(STATICCHECK)

$(TOOLS)/stripe-mock:
	GOBIN=$(TOOLS) $(GO) install $(STRIPE_MOCK)

.PHONY: build
build: ## build bin/outboxd, its version from git describe (outboxd version); put bin/ on your PATH to type outboxd
	@echo "building bin/outboxd (the first build compiles every dependency: a minute or two)"
	@$(GO) build -ldflags "$(LDFLAGS)" -o bin/outboxd ./cmd/outboxd
	@echo 'built bin/outboxd; to type outboxd, put bin/ on your PATH: export PATH="$$PWD/bin:$$PATH"'

.PHONY: docker
docker: ## build the outboxd image (outboxd:local), its version from git describe as make build's
	docker build --build-arg VERSION=$(VERSION) -t outboxd:local .

.PHONY: migrate
migrate: db-check ## migrate the database at DATABASE_URL
	$(GO) run ./cmd/outboxd migrate

.PHONY: chromium
chromium: ## install Debian's Chromium for the dashboard's browser test, if missing
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq chromium; } || \
	  echo "warning: Chromium is not installed; the dashboard browser test will be skipped (and fail under CI=true)"

.PHONY: pgbouncer
pgbouncer: ## install Debian's PgBouncer for the tests behind a transaction pooler, if missing
	@command -v pgbouncer >/dev/null || test -x /usr/sbin/pgbouncer || \
	  { command -v apt-get >/dev/null && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer; } || \
	  echo "warning: PgBouncer is not installed; the tests behind a pooler will be skipped (and fail under CI=true)"

.PHONY: db-check
db-check: ## check that PostgreSQL answers at DATABASE_URL
	@command -v pg_isready >/dev/null || exit 0; \
	for i in $$(seq 1 30); do \
	  pg_isready -q -d "$(DATABASE_URL)" && exit 0; sleep 1; \
	done; \
	echo "PostgreSQL does not answer at DATABASE_URL ($(DATABASE_URL)); start it, or set DATABASE_URL"; exit 1
