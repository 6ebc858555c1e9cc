# Every command a user or CI runs. `make demo` needs nothing but Go. `make test`
# sets itself up: .ci/with-services starts a private PostgreSQL and a private
# RabbitMQ on free loopback ports (files in the git-ignored .cache/services/),
# installs what is missing with apt-get when it runs as root (redis-server,
# postgresql, rabbitmq-server, nodejs and npm), runs the tests of every module
# with IDEMKIT_REQUIRE_SERVICES=1 (a missing server fails its tests, never skips
# them), and stops the servers at the end; where it cannot provide a server it
# fails at once saying what to install or which variable to set. Servers named in
# IDEMKIT_POSTGRES_DSN, IDEMKIT_AMQP_URL or IDEMKIT_DYNAMODB_ENDPOINT are used
# instead. The tests start their own redis-server processes; the store/dynamodb
# tests start dynalite, which `make dynalite` installs with npm into
# .cache/dynalite. `make test-loaded` runs the suite beside a CPU hog that keeps
# every core busy (.ci/cpu-hog).

GO          ?= go
STATICCHECK := $(CURDIR)/bin/staticcheck
STATICCHECK_VERSION := v0.8.2
PKGS        := ./...

# Every Go module in the repository: the root and each directory with its own
# go.mod (optional integrations kept out of the root module's dependencies).
# test, test-short and lint run in each of them, PKGS relative to each module.
MODULES := $(patsubst ./%,%,$(patsubst %/go.mod,%,$(shell find . -name go.mod -not -path './.git/*' | sort)))

# Each module is built, tested and linted against its own go.mod, the way its users
# get it (a sub-module reaches the root through its replace line); go.work ties the
# modules together for editors and ad-hoc commands only.
export GOWORK := off

# each_module runs $(1) in every module and fails at the end if any of them failed.
define each_module
	@fail=0; for m in $(MODULES); do echo "== $$m: $(1)"; (cd $$m && $(1)) || fail=1; done; exit $$fail
endef

.PHONY: demo test test-short test-loaded test-modules bench bench-kafka bench-amqp bench-http bench-replay bench-postgres bench-dynamodb dynalite bench-plugins lint install-check ci up down clean bench-all profile-pipeline profile-batch \
	bench-durability bench-ui profile-kafka profile-amqp screenshots

## demo: run the quickstart with zero set-up (in-process Redis unless IDEMKIT_REDIS_ADDR is set)
demo:
	$(GO) run ./examples/quickstart

## test: run every test of every module against real servers (started here), with the race detector
test:
	@bash .ci/with-services $(MAKE) --no-print-directory test-modules TESTFLAGS=-race

## test-short: the same without the race detector, for a quick loop
test-short:
	@bash .ci/with-services $(MAKE) --no-print-directory test-modules TESTFLAGS=

## test-loaded: `make test` beside a CPU hog that keeps every core busy, as on a loaded machine
test-loaded:
	@bash .ci/cpu-hog $(MAKE) --no-print-directory test

# test-modules: the tests of every module, against the servers in the environment
# (make test and test-short give it theirs through .ci/with-services). TESTTIMEOUT
# only stops a hung package: go test's default of 10 minutes is a guess a loaded
# machine can outrun.
TESTTIMEOUT ?= 30m
test-modules: dynalite
	$(call each_module,$(GO) test $(TESTFLAGS) -count=1 -timeout $(TESTTIMEOUT) $(PKGS))

## bench: floor vs ExecuteIdempotently vs ExecuteBatch against a real Redis, one table
bench:
	$(GO) run ./internal/bench

## bench-kafka: raw franz-go, ExecuteBatch alone, the adapter (no-op, 2 ms, a stalled record) and a hand-rolled lane, 3 repetitions; the adapter's own CPU judged by the median of -rounds back-to-back rounds
bench-kafka:
	$(GO) run ./internal/bench/kafka

## bench-amqp: raw amqp091-go (ack each, multiple-ack), the worker (no-op, 2 ms, a stalled message) and a hand-rolled lane, 3 repetitions; stall isolation judged by the median of -pairs paired runs of the 2 ms and stall lanes
bench-amqp:
	$(GO) run ./internal/bench/amqp

## bench-http: the handler without and with the Idempotency-Key middleware (first request, replay), 3 repetitions
bench-http:
	$(GO) run ./internal/bench/http

## bench-replay: plan over 1,000,000 keys (time, Redis CPU, a concurrent PING's worst latency), replay vs ExecuteBatch alone
bench-replay:
	$(GO) run ./internal/bench/replay
## bench-postgres: transactional completion (InTx) against the same transaction without it, and the hybrid against the Redis store alone, 3 repetitions
bench-postgres:
	$(GO) run ./internal/bench/pgtx

## bench-dynamodb: claims + completions vs plain conditional PutItems against a private dynalite, 3 repetitions
bench-dynamodb: dynalite
	cd store/dynamodb && $(GO) run ./internal/bench

## dynalite: install the DynamoDB-protocol test server into .cache/dynalite (npm; a no-op when there)
dynalite:
	@bash .ci/install-dynalite

## bench-plugins: ExecuteBatch B=100 without observers vs the Prometheus and OpenTelemetry plugins, interleaved, 3 repetitions
bench-plugins:
	cd internal/bench/plugins && $(GO) run .

## bench-durability: the Redis store with and without WithReplicaAcks(1, ...) (and on claims) against a private primary and replica, 3 repetitions
bench-durability:
	$(GO) run ./internal/bench/durability

## bench-ui: server time of the UI's overview and of a 100-record page on Redis with 1,000,000 records, 3 repetitions
bench-ui:
	IDEMKIT_UI_BENCH_RECORDS=1000000 $(GO) test -run '^$$' -bench '^BenchmarkPages$$' -benchtime 30x -count 3 -timeout 30m ./admin/ui/

## bench-all: every bench program's lanes, one after another (core, Kafka, RabbitMQ, HTTP, replay, PostgreSQL, Redis durability); fails at the end if one failed
BENCH_PROGRAMS := ./internal/bench ./internal/bench/kafka ./internal/bench/amqp ./internal/bench/http ./internal/bench/replay ./internal/bench/pgtx ./internal/bench/durability
bench-all:
	@fail=0; for b in $(BENCH_PROGRAMS); do echo "== $(GO) run $$b"; $(GO) run $$b || fail=1; done; exit $$fail

# profile-pipeline / profile-batch: CPU and allocation profiles of the consumer
# benchmark (one op = one message, no-op handler, against the private Redis the
# test starts), printed as pprof's top 20; the profiles stay in PROFDIR for
# `go tool pprof -http`. PROFN messages per run.
PROFDIR ?= .cache/profiles
PROFN   ?= 200000
define profile
	@mkdir -p $(PROFDIR)
	$(GO) test -run '^$$' -bench '^Benchmark$(1)$$' -benchtime $(PROFN)x -count 1 -o $(PROFDIR)/consumer.test \
		-cpuprofile $(PROFDIR)/$(2).cpu -memprofile $(PROFDIR)/$(2).mem ./consumer
	@echo "== CPU, top 20 by own time"
	@$(GO) tool pprof -top -nodecount=20 $(PROFDIR)/consumer.test $(PROFDIR)/$(2).cpu 2>/dev/null | tail -n +5
	@echo "== CPU, top 20 of package consumer by cumulative time"
	@$(GO) tool pprof -top -cum -nodecount=20 -focus 'idemkit/consumer\.' -show 'idemkit/consumer\.' $(PROFDIR)/consumer.test $(PROFDIR)/$(2).cpu 2>/dev/null | tail -n +6
	@echo "== allocations (objects), top 20"
	@$(GO) tool pprof -sample_index=alloc_objects -top -nodecount=20 $(PROFDIR)/consumer.test $(PROFDIR)/$(2).mem 2>/dev/null | tail -n +5
endef

## profile-pipeline: pprof top 20 (CPU, allocations) of BenchmarkPipeline, one message per op
profile-pipeline:
	$(call profile,Pipeline,pipeline)

## profile-batch: pprof top 20 (CPU, allocations) of BenchmarkExecuteBatch, one message per op
profile-batch:
	$(call profile,ExecuteBatch,batch)

## profile-kafka: CPU and allocation profiles of the Kafka adapter's no-op lane: pprof top 20, CPU split adapter / engine / clients / runtime
profile-kafka:
	PROFILE_DIR=$(PROFDIR) GO=$(GO) bash internal/bench/kafka/profile.sh

## profile-amqp: CPU and allocation profiles of the RabbitMQ worker's no-op lane (3 repetitions), top 20 of each
profile-amqp:
	@mkdir -p $(PROFDIR)
	$(GO) run ./internal/bench/amqp -profile noop -cpuprofile $(PROFDIR)/amqp-noop.cpu -memprofile $(PROFDIR)/amqp-noop.mem
	$(GO) tool pprof -top -nodecount=20 $(PROFDIR)/amqp-noop.cpu
	$(GO) tool pprof -sample_index=alloc_space -top -nodecount=20 $(PROFDIR)/amqp-noop.mem

## screenshots: drive the operator UI in chromium (admin/ui/browsertest) and save a screenshot of each page in docs/ui
screenshots:
	cd admin/ui/browsertest && IDEMKIT_UI_SCREENSHOTS=$(CURDIR)/docs/ui $(GO) test -count=1 -run '^TestBrowser$$' .

$(STATICCHECK):
	GOBIN=$(CURDIR)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## lint: gofmt, go.work lists every module, go.mod files tidy, go vet, staticcheck
lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt wants to rewrite:"; echo "$$out"; exit 1; fi
	@want=$$(printf '%s\n' $(MODULES) | sort | paste -sd' ' -); \
	have=$$($(GO) work edit -json go.work | sed -n 's/.*"DiskPath": "\(.*\)".*/\1/p' | sed 's|^\./||' | sort | paste -sd' ' -); \
	if [ "$$want" != "$$have" ]; then echo "go.work must use every module: want [$$want], have [$$have] (go work use <dir>)"; exit 1; fi
	$(call each_module,$(GO) mod tidy -diff)
	$(call each_module,$(GO) vet $(PKGS))
	$(call each_module,$(STATICCHECK) $(PKGS))

## install-check: a fresh module outside the repository requires idemkit and tidies without replace lines
install-check:
	bash .ci/install-check

## ci: what .ci/run runs
ci: lint test demo install-check

## up / down: a developer's stack (Redis, RabbitMQ, Kafka) for users with Docker
up:
	docker compose up -d --wait

down:
	docker compose down -v

clean:
	rm -rf bin
