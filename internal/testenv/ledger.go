package testenv

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/redis/go-redis/v9"
)

// Ledger is a side effect for adapter tests, kept in Redis so that worker processes
// share it. Like a table updated with ... WHERE fence < $1, a write is effective
// only when its fence is larger than the last effective one for the same id;
// effective writes are counted per id, refused (stale) ones in all.
type Ledger struct {
	c      redis.UniversalClient
	Fences string // hash: id -> last effective fence
	counts string // hash: id -> effective writes, "_stale" -> refused writes
}

var ledgerScript = redis.NewScript(`
local f = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) <= f then
  redis.call('HINCRBY', KEYS[2], '_stale', 1)
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
return 1`)

// NewLedger returns the ledger kept under prefix.
func NewLedger(c redis.UniversalClient, prefix string) *Ledger {
	return &Ledger{c: c, Fences: "{" + prefix + "}:ledger-fences", counts: "{" + prefix + "}:ledger-counts"}
}

// Apply writes the effect for id under the fence of the handler's context and
// reports whether it was effective.
func (l *Ledger) Apply(ctx context.Context, id string) (bool, error) {
	fence, ok := consumer.FenceFromContext(ctx)
	if !ok {
		return false, errors.New("testenv: no fence in the handler's context")
	}
	n, err := ledgerScript.Run(context.WithoutCancel(ctx), l.c, []string{l.Fences, l.counts}, id, fence).Int()
	return n == 1, err
}

// Counts returns the effective writes per id and the number of refused ones.
func (l *Ledger) Counts(t testing.TB) (map[string]int, int) {
	t.Helper()
	all, err := l.c.HGetAll(context.Background(), l.counts).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int, len(all))
	stale := 0
	for k, v := range all {
		n, _ := strconv.Atoi(v)
		if k == "_stale" {
			stale = n
			continue
		}
		out[k] = n
	}
	return out, stale
}

// Total is the number of ids with an effective write (plus one once a write was refused).
func (l *Ledger) Total(t testing.TB) int {
	n, err := l.c.HLen(context.Background(), l.counts).Result()
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}
