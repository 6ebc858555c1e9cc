package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/admin/admintest"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { testenv.Run(m) }

func TestOperatorMemory(t *testing.T) {
	admintest.Run(t, admintest.Fixtures{
		New: func(t *testing.T, opts ...consumer.Option) (admintest.Store, error) {
			return memory.NewStore(opts...)
		},
	})
}

// redisFixtures runs the suite on client c, each store under its own prefix.
func redisFixtures(c redis.UniversalClient) admintest.Fixtures {
	return admintest.Fixtures{
		New: func(t *testing.T, opts ...consumer.Option) (admintest.Store, error) {
			return redisstore.NewStore(c, append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t))}, opts...)...)
		},
		Sibling: func(t *testing.T, s admintest.Store, opts ...consumer.Option) (admintest.Store, error) {
			return redisstore.NewStore(c, append([]consumer.Option{consumer.WithPrefix(s.Settings().Prefix)}, opts...)...)
		},
		Plant: func(t *testing.T, s admintest.Store) []consumer.Key {
			ctx := context.Background()
			st := s.Settings()
			at := func(k string) string { return st.Prefix + ":{" + st.Scope + ":" + k + "}" }
			for _, err := range []error{
				c.Set(ctx, at("junk"), "not a record", time.Hour).Err(),
				c.HSet(ctx, at("hash"), "f", "v").Err(),
				c.Expire(ctx, at("hash"), time.Hour).Err(),
				c.Set(ctx, st.Prefix+":other", "x", time.Hour).Err(), // under the prefix, not a record key
			} {
				if err != nil {
					t.Fatal(err)
				}
			}
			return []consumer.Key{"hash", "junk"}
		},
	}
}

func TestOperatorRedis(t *testing.T) {
	admintest.Run(t, redisFixtures(testenv.Redis(t)))
}

func TestOperatorRedisCluster(t *testing.T) {
	cl := testenv.RedisCluster(t).Client(t)
	admintest.Run(t, redisFixtures(cl))
}

// TestClusterScanEveryPrimary checks that a scan on a Cluster steps through
// every primary: the records of one scope are spread over all three.
func TestClusterScanEveryPrimary(t *testing.T) {
	cl := testenv.RedisCluster(t).Client(t)
	s, err := redisstore.NewStore(cl, consumer.WithPrefix(testenv.Prefix(t)), consumer.WithScope("svc-a"), consumer.WithLease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		key := consumer.Key("k" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		if rep := s.Begin(context.Background(), []consumer.Claim{{Key: key, Owner: "o"}})[0]; !rep.Claimed() {
			t.Fatalf("claim %s: %+v", key, rep)
		}
	}
	nodes, seen := map[string]int{}, map[consumer.Key]bool{}
	for cur := ""; ; {
		p, err := s.ScanRecords(context.Background(), consumer.ScanQuery{Scope: "svc-a", Cursor: cur, Count: 50})
		if err != nil {
			t.Fatal(err)
		}
		nodes[p.Node] += len(p.Records)
		for _, r := range p.Records {
			seen[r.Key] = true
		}
		if cur = p.Next; cur == "" {
			break
		}
	}
	if len(nodes) != 3 || len(seen) != 60 {
		t.Fatalf("%d records found on %d primaries, want 60 on 3: %v", len(seen), len(nodes), nodes)
	}
}
