# sqsonce — run `make help` for the targets.

VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -X main.version=$(VERSION)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Every target that needs the local SQS-compatible server runs through this:
# it installs the server from the npm registry on first use, starts it on a
# free loopback port and stops it afterwards.
WITH_SQS    := scripts/with-sqs.sh
# The same for the tests of the shared ledger on PostgreSQL: a throwaway
# cluster on a free loopback port (Debian's postgresql package, installed
# with apt-get when missing, with sudo when not root), stopped and removed
# afterwards.
WITH_PG     := scripts/with-postgres.sh
# The same for the local DynamoDB-compatible server (dynalite), which the
# DynamoDB ledger's tests need. Wrappers compose: $(WITH_SQS) $(WITH_DYNALITE) CMD.
WITH_DYNALITE := scripts/with-dynalite.sh
# promtool, for the tests of the alert rules in deploy/prometheus/: Debian's
# prometheus package, installed with apt-get when missing, with sudo when
# not root (its server is never started).
WITH_PROMTOOL := scripts/with-promtool.sh
# A second implementation of the AWS APIs for `make interop`: Python moto
# (installed with pip, not from npm) serving SQS, SNS, S3 and DynamoDB on
# one free loopback port, stopped afterwards.
WITH_MOTO   := scripts/with-moto.sh

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/sqsonce with the version stamped in.
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/sqsonce ./cmd/sqsonce

.PHONY: deps
deps: ## Install the local SQS- and DynamoDB-compatible servers (npm) and Go modules.
	npm ci --prefix scripts/sqs --no-audit --no-fund
	npm ci --prefix scripts/dynalite --no-audit --no-fund
	go mod download

.PHONY: test
test: ## Run every test, with the race detector, against local SQS- and DynamoDB-compatible servers and PostgreSQL, with promtool.
	$(WITH_SQS) $(WITH_PG) $(WITH_DYNALITE) $(WITH_PROMTOOL) go test -race -count=1 ./...

# The packages whose tests talk to AWS APIs (SQS, SNS, S3, DynamoDB), which
# `make interop` runs against moto, the chaos campaign's short form among
# them, one package at a time (-p 1): moto is one Python process, and the
# packages' DynamoDB and SQS load together slowed it past the tests' waits.
INTEROP_PKGS := ./internal/sqstest/ ./internal/dynamotest/ ./worker/ ./replay/ ./ingest/ ./cmd/sqsonce/ ./ledger/dynamodb/ ./scripts/chaos/

.PHONY: interop
interop: ## Run the tests that talk to AWS APIs against a second implementation, moto, without the race detector (needs moto: pip install "moto[server]").
	$(WITH_MOTO) $(WITH_PG) go test -p 1 -count=1 -timeout 20m $(INTEROP_PKGS)

.PHONY: test-short
test-short: ## Run the tests without the race detector.
	$(WITH_SQS) $(WITH_PG) $(WITH_DYNALITE) $(WITH_PROMTOOL) go test -count=1 ./...

.PHONY: rules
rules: ## Check the alert rules (deploy/prometheus/) and run their unit tests with promtool.
	cd deploy/prometheus && ../../$(WITH_PROMTOOL) sh -c 'promtool check rules sqsonce.rules.yml && promtool test rules sqsonce.rules.test.yml'

# The console in headless Chromium (Debian's chromium, installed with apt-get
# when missing, with sudo when not root), driven from Go with chromedp.
# Screenshots of each page go to $(SCREENSHOTS) (default: a new folder under
# the system's temporary directory; the test names it). With SQSONCE_README_SCREENSHOT set to a
# path (of docs/console-overview.png, say), the overview's is also written
# there.
SCREENSHOTS ?=

.PHONY: test-browser
test-browser: ## Drive the console in headless Chromium: overview, workers, filters, an operation's story, dead letters, a replay by reason group after its dry run, a forget by filter, a pause and a resume, the action log, refused writes; keeps screenshots.
	@scripts/apt-install.sh chromium chromium
	SQSONCE_SCREENSHOTS=$(SCREENSHOTS) $(WITH_SQS) go test -tags browser -count=1 -run '^TestConsole_Browser$$' -v ./cmd/sqsonce/

# How long `make fuzz` runs each fuzz target, e.g. make fuzz FUZZTIME=5m.
# The targets are found with `go test -list`, so a new Fuzz function needs
# no change here. Inputs that fail are written to testdata/fuzz/ of their
# package.
FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 30s).
	@set -e; \
	for pkg in $$(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...); do \
		list=$$(go test -list '^Fuzz' $$pkg); \
		for target in $$(printf '%s\n' "$$list" | grep '^Fuzz' || true); do \
			echo "fuzz: $$target in $$pkg for $(FUZZTIME)"; \
			go test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

.PHONY: lint
lint: ## gofmt, go vet, staticcheck, and no build output tracked in git.
	scripts/lint/tracked-binaries.sh
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go vet ./...
	go run $(STATICCHECK) ./...

.PHONY: bench-go
bench-go: ## Go benchmarks: ledger throughput (bbolt, PostgreSQL, DynamoDB), Get, List's first page and Overview on 1M records, sweeping, the worker's drain (needs the local servers).
	SQSONCE_TEST_POSTGRES_DURABLE=1 $(WITH_SQS) $(WITH_PG) $(WITH_DYNALITE) go test -run '^$$' -bench . -benchmem -timeout 30m ./...

.PHONY: bench-ingest
bench-ingest: ## The webhook receiver against a plain net/http handler that sends to SQS unchecked: requests/s, p50 and p99, five rounds in turn (local SQS server).
	@# Each round runs each in a process of its own, with a server of its
	@# own, and keeps its second run: the server warms up in the first.
	@for round in 1 2 3 4 5; do for b in plain ingest; do 		$(WITH_SQS) go test -run '^$$' -bench "BenchmarkReceiver/$$b\$$" -benchtime 5000x -count 2 ./ingest/ | grep '^Benchmark' | tail -n 1; 	done; done

# bench and bench-go run PostgreSQL with fsync and synchronous_commit on, as
# in production, unlike the tests' (see scripts/with-postgres.sh).
# bench's size (messages per run in the stress and in the realistic profile)
# and rounds, and any other flag of scripts/bench (`go run ./scripts/bench -h`),
# e.g. make bench BENCH_MESSAGES=5000 BENCH_ROUNDS=5
# or make bench BENCH_FLAGS='-profile realistic -concurrency 16 -ledger ""'
# The console's cost alone (the worker without and with `sqsonce console` open
# and refreshing, on an empty ledger and on one of a million records):
# make bench BENCH_FLAGS='-console-cost'
# or, smaller: make bench BENCH_FLAGS='-console-cost -console-prefill 200000 -console-n 30000'
# The fleet-wide rate alone (three workers on one PostgreSQL ledger, rate 40):
# make bench BENCH_FLAGS='-contenders "" -ledger "" -console-prefill ""'
BENCH_MESSAGES           ?= 20000
BENCH_REALISTIC_MESSAGES ?= 5000
BENCH_ROUNDS             ?= 3
BENCH_FLAGS              ?=

.PHONY: bench
bench: build ## Compare sqsonce with a plain Go poller and sqs-consumer, stress and realistic (delayed SQS, handlers that work), then what an open console costs it, then its ledgers, then a fleet-wide rate (three workers on PostgreSQL), on local servers (docs/benchmarks.md).
	@test -f scripts/bench/node/node_modules/sqs-consumer/package.json || npm ci --prefix scripts/bench/node --no-audit --no-fund
	SQSONCE_TEST_POSTGRES_DURABLE=1 $(WITH_SQS) $(WITH_PG) $(WITH_DYNALITE) go run ./scripts/bench --bin bin/sqsonce -n $(BENCH_MESSAGES) -realistic-n $(BENCH_REALISTIC_MESSAGES) -rounds $(BENCH_ROUNDS) $(BENCH_FLAGS)

# make chaos's size and any other flag of scripts/chaos (`go run ./scripts/chaos -h`),
# e.g. make chaos CHAOS_FLAGS='-seed 7 -keep'. It mounts a tmpfs: run it as root.
# Its shared-ledger campaign starts a PostgreSQL cluster of its own (it stops
# it hard); $(WITH_PG) makes sure the server binaries are installed.
CHAOS_FLAGS ?=

.PHONY: chaos
chaos: ## Kill, fault and fill the worker's world, standard, FIFO, on a shared PostgreSQL ledger and with transactional handlers, and audit every operation (one table; ~8 min; root).
	$(WITH_SQS) $(WITH_PG) go run ./scripts/chaos $(CHAOS_FLAGS)

# The flow-control campaigns (scripts/chaos/flow.go) run apart, with a budget
# of their own: their outages of the downstream last a minute each.
.PHONY: chaos-flow
chaos-flow: ## Take the handlers' downstream down (503, hangs, refused connections, 429) under rate limits per handler and per tenant and a concurrency limit, kill and stop the workers, and audit flow control (three campaigns at once; ~8 min).
	scripts/apt-install.sh faketime faketime
	$(WITH_SQS) $(WITH_PG) go run ./scripts/chaos -only flow,flow-fifo,flow-bbolt $(CHAOS_FLAGS)

.PHONY: demo
demo: build ## Run the worker on a local SQS-compatible server and show what it did.
	$(WITH_SQS) go run ./scripts/demo --bin bin/sqsonce

.PHONY: demo-shared
demo-shared: build ## The demo with three workers on one queue, sharing a ledger in a local PostgreSQL.
	$(WITH_SQS) $(WITH_PG) go run ./scripts/demo --bin bin/sqsonce -workers 3 -ledger postgres

.PHONY: demo-tx
demo-tx: build ## Transactional handlers: a Go handler's inserts and the completions in one PostgreSQL transaction, a worker killed mid-run, every order inserted once.
	$(WITH_SQS) $(WITH_PG) go run ./scripts/demo --bin bin/sqsonce -tx

.PHONY: demo-ingest
demo-ingest: build ## Webhooks: sqsonce ingest in front of a FIFO queue, signed GitHub, Stripe and Standard Webhooks requests (curl, openssl), each event's handler run once.
	$(WITH_SQS) go run ./scripts/demo --bin bin/sqsonce -ingest

# The port of `make local-sqs`, e.g. make local-sqs SQS_PORT=9325.
SQS_PORT ?= 9324

.PHONY: local-sqs
local-sqs: ## Run a local SQS-compatible server in the foreground with a queue and its dead-letter queue, and print a configuration for them (docs/getting-started.md).
	scripts/local-sqs.sh $(SQS_PORT)

.PHONY: clean
clean: ## Remove build output and the installed test servers.
	rm -rf bin scripts/sqs/node_modules scripts/dynalite/node_modules
