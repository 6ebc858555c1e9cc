module github.com/idemkit/idemkit

// The lowest Go the dependencies allow: go-redis v9.23.0, franz-go v1.22.3 and
// golang.org/x/{sync,sys,text} declare go 1.26.0, so any Go 1.26 release builds
// idemkit. Go orders "1.26" before "1.26.0", so the shorter form is not tidy here.
go 1.26.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	// v4.18.0, not v4.18.1: both have the same code, but v4.18.1 requires
	// rueidiscompat v1.0.79, which the module proxy refuses, and a user's
	// `go mod tidy` loads redsync's tests (which import rueidiscompat).
	// .ci/install-check fails if a dependency bump brings such a version back.
	github.com/go-redsync/redsync/v4 v4.18.0
	github.com/google/uuid v1.6.0
	github.com/jackc/pgx/v5 v5.12.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kadm v1.19.0
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
