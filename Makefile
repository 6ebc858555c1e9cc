# Every command a user or CI runs. `make demo` needs nothing but Go; `make test`
# needs redis-server on PATH (or IDEMKIT_REDIS_ADDR) and a RabbitMQ broker on
# 127.0.0.1:5672 (or IDEMKIT_AMQP_URL); .ci/run installs and starts both.

GO          ?= go
STATICCHECK := bin/staticcheck
STATICCHECK_VERSION := v0.8.2
PKGS        := ./...

.PHONY: demo test test-short bench bench-kafka bench-amqp bench-http lint ci up down clean

## demo: run the quickstart with zero set-up (in-process Redis unless IDEMKIT_REDIS_ADDR is set)
demo:
	$(GO) run ./examples/quickstart

## test: run every test against real servers, with the race detector
test:
	$(GO) test -race -count=1 $(PKGS)

## test-short: the same without the race detector, for a quick loop
test-short:
	$(GO) test -count=1 $(PKGS)

## bench: floor vs ExecuteIdempotently vs ExecuteBatch against a real Redis, one table
bench:
	$(GO) run ./internal/bench

## bench-kafka: raw franz-go group consumption vs the Kafka adapter, one table
bench-kafka:
	$(GO) run ./internal/bench/kafka

## bench-amqp: raw amqp091-go manual-ack consumer vs the RabbitMQ worker, one table
bench-amqp:
	$(GO) run ./internal/bench/amqp

## bench-http: the handler without and with the Idempotency-Key middleware (first request, replay), 3 repetitions
bench-http:
	$(GO) run ./internal/bench/http

$(STATICCHECK):
	GOBIN=$(CURDIR)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## lint: gofmt, go vet, staticcheck
lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt wants to rewrite:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)

## ci: what .ci/run runs
ci: lint test demo

## up / down: a developer's stack (Redis, RabbitMQ, Kafka) for users with Docker
up:
	docker compose up -d --wait

down:
	docker compose down -v

clean:
	rm -rf bin
