# mailroom — see README.md. `make help` lists the targets.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
GO      ?= go
DATA    ?= ./data

.DEFAULT_GOAL := help

.PHONY: help build run test test-short soak soak-short bench fmt fmt-check vet lint fuzz check release clean

help: ## show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/mailroom (static, assets embedded, version stamped)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/mailroom ./cmd/mailroom

run: build ## run the appliance with demo data in ./data and print where to log in
	MAILROOM_DATA_DIR=$(DATA) ./bin/mailroom serve --demo

test: fmt-check vet ## gofmt and vet, then every test, four parallel tests a package (most wait on timers and the emulator, not the CPU; browser and redis-server tests skip loudly when missing, fail under CI=true), then the soak's 2-minute CI version on its own, so its load does not slow the timed tests
	$(GO) test -count=1 -timeout 9m -parallel 4 $$($(GO) list ./... | grep -v /internal/soak)
	$(GO) test -count=1 -timeout 9m ./internal/soak/
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x ./... > /dev/null

# The soak (internal/soak): the built binary under mixed load, killed with
# SIGKILL every 20-60 s, for SOAK_DURATION on each broker, one after the
# other (embedded, then redis-server; it needs redis-server, and fails
# without it under CI=true). SOAK_SEED replays a run's schedule.
SOAK_DURATION ?= 10m
SOAK_TIMEOUT  ?= 1h

soak: ## the soak test for SOAK_DURATION (default 10m) per broker; prints kills, Redis losses, tasks, rows lost and doubled
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -v -parallel 1 -timeout $(SOAK_TIMEOUT) -run '^TestSoak$$' ./internal/soak/

soak-short: ## the soak for 90 s on both brokers at once (about 4 minutes with the drain)
	SOAK_DURATION=90s $(GO) test -count=1 -v -parallel 2 -timeout 20m -run '^TestSoak$$' ./internal/soak/

test-short: ## quick tests only
	$(GO) test -short -count=1 ./...

bench: build ## run every benchmark scenario and write bench/RESULTS.md whole (a failed scenario is a FAILED row, and make fails)
	@mkdir -p bench
	./bin/mailroom bench --markdown > bench/RESULTS.md.tmp; rc=$$?; mv bench/RESULTS.md.tmp bench/RESULTS.md; cat bench/RESULTS.md; exit $$rc

fmt: ## format the code
	gofmt -w $$(git ls-files '*.go')

fmt-check: ## fail when gofmt would change a file
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet: ## go vet
	$(GO) vet ./...

lint: fmt-check vet ## gofmt and go vet (staticcheck too when installed)
	@if command -v staticcheck >/dev/null; then staticcheck ./...; else echo "staticcheck not installed; skipped"; fi

# The parsers that face the network, each fuzzed for FUZZTIME.
FUZZTIME ?= 1m
FUZZ_TARGETS := ./web:FuzzBindJSON ./queue/gmail:FuzzPushDecode ./queue/rules:FuzzMatch ./queue/rules:FuzzRuleParse ./queue/sheets:FuzzSubmissionAnswers ./store:FuzzParseEventCursor

fuzz: ## fuzz every network-facing parser for FUZZTIME each (default 1m)
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$fn in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	done

check: lint fuzz ## lint, the fuzz targets (a minute each) and the race detector on the tests
	$(GO) test -race -count=1 -timeout 15m ./...

release: ## cross-compile static binaries into dist/
	@mkdir -p dist
	for target in linux/amd64 linux/arm64 darwin/arm64; do \
		os=$${target%/*}; arch=$${target#*/}; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' \
			-o dist/mailroom-$(VERSION)-$$os-$$arch ./cmd/mailroom || exit 1; \
	done
	@ls -l dist

clean: ## remove build output
	rm -rf bin dist
