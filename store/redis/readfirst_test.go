package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/consumer/consumertest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// readFirstStore sends every claim with ReadFirst, as the HTTP middleware does.
type readFirstStore struct{ consumer.Store }

func (s readFirstStore) Begin(ctx context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	hinted := append([]consumer.Claim(nil), claims...)
	for i := range hinted {
		hinted[i].ReadFirst = true
	}
	return s.Store.Begin(ctx, hinted)
}

// The whole conformance suite with every claim read first: the hint changes what
// a claim costs, never what it answers.
func TestRedisStoreConformanceReadFirst(t *testing.T) {
	base := redisFactory(func(t *testing.T) redis.UniversalClient { return testenv.Redis(t) })
	consumertest.Run(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		s, err := base(t, opts...)
		if err != nil {
			return nil, err
		}
		return readFirstStore{s}, nil
	})
}

// commandCalls is what INFO commandstats says each command was called, by name
// (calls made inside scripts included).
func commandCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out
}

// What the server ran for one claim marked ReadFirst, by what the key holds,
// counted by Redis itself (INFO commandstats on a private server): a completed or
// failed record answers from one GET, no script and no write; everything else
// reaches the begin script (a missing key the SET NX claim) and answers as
// without the hint.
func TestReadFirstCosts(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := srv.Client(t)
	s := newRedisStore(t, c)
	ctx := context.Background()
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	fp := consumer.FingerprintOf([]byte("payload"))
	noop := func(context.Context) (string, error) { return "ch_1", nil }
	claim := func(key consumer.Key, fp consumer.Fingerprint) consumer.ClaimReply {
		return s.Begin(ctx, []consumer.Claim{{Key: key, Owner: "replay", Fingerprint: fp, ReadFirst: true}})[0]
	}
	cases := []struct {
		name    string
		setup   func(key consumer.Key)
		fp      consumer.Fingerprint
		status  consumer.ClaimStatus
		corrupt bool
		calls   map[string]int64 // what the server ran (inside scripts too), INFO and CONFIG aside
	}{
		{"completed", func(key consumer.Key) {
			if r := consumer.ExecuteIdempotently(ctx, s, key, []byte("payload"), noop); r.Outcome != consumer.Success {
				t.Fatalf("%v %v", r.Outcome, r.Err)
			}
		}, fp, consumer.StatusCompleted, false, map[string]int64{"getex": 1}},
		{"failed for good", func(key consumer.Key) {
			r := consumer.ExecuteIdempotently(ctx, s, key, []byte("payload"), func(context.Context) (string, error) {
				return "", consumer.Permanent(errors.New("card declined"))
			})
			if r.Outcome != consumer.Error {
				t.Fatalf("%v %v", r.Outcome, r.Err)
			}
		}, fp, consumer.StatusFailed, false, map[string]int64{"getex": 1}},
		{"completed, another payload", func(key consumer.Key) {
			if r := consumer.ExecuteIdempotently(ctx, s, key, []byte("other"), noop); r.Outcome != consumer.Success {
				t.Fatalf("%v %v", r.Outcome, r.Err)
			}
		}, fp, consumer.StatusConflict, false, map[string]int64{"getex": 1, "get": 1, "evalsha": 1, "set": 1}},
		{"started by another owner", func(key consumer.Key) {
			if r := s.Begin(ctx, []consumer.Claim{{Key: key, Owner: "other", Fingerprint: fp}})[0]; !r.Claimed() {
				t.Fatalf("%+v", r)
			}
		}, fp, consumer.StatusInProgress, false, map[string]int64{"getex": 1, "get": 1, "evalsha": 1, "set": 1, "pttl": 1}},
		{"a value that is not a record", func(key consumer.Key) {
			if err := c.Set(ctx, s.RecordKey(key), "hello", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
		}, fp, 0, true, map[string]int64{"getex": 1, "get": 1, "evalsha": 1, "set": 1}},
		{"no record", func(consumer.Key) {}, fp, consumer.StatusAcquired, false, map[string]int64{"getex": 1, "set": 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := k("read-first", tc.name)
			tc.setup(key)
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			rep := claim(key, tc.fp)
			calls := commandCalls(t, c)
			delete(calls, "info")
			delete(calls, "config|resetstat")
			if len(calls) != len(tc.calls) {
				t.Errorf("the server ran %v, want %v", calls, tc.calls)
			}
			for name, n := range tc.calls {
				if calls[name] != n {
					t.Errorf("the server ran %v, want %v", calls, tc.calls)
					break
				}
			}
			switch {
			case tc.corrupt:
				if !errors.Is(rep.Err, consumer.ErrCorruptRecord) {
					t.Fatalf("claim: %+v, want a corrupt record", rep)
				}
			case rep.Err != nil || rep.Status != tc.status:
				t.Fatalf("claim: %+v, want %v", rep, tc.status)
			}
		})
	}
}
