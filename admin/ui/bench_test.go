package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/admin/ui"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// benchStore is the Redis store of BenchmarkPages, loaded once per process.
var benchStore struct {
	once  sync.Once
	store *redisstore.Store
	c     *redis.Client
	err   error
}

// benchRecords is how many records BenchmarkPages loads:
// IDEMKIT_UI_BENCH_RECORDS, default 1,000,000.
func benchRecords() int {
	if n, err := strconv.Atoi(os.Getenv("IDEMKIT_UI_BENCH_RECORDS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// loadBench fills a Redis store with n records through the store's own batched
// API: claims of fresh keys (one pipeline of SET NX per 1,000), then 9 of 10
// completed and 1 of 100 failed (one pipeline of scripts per 1,000); the rest
// stay started, their owner gone.
func loadBench(b *testing.B, n int) (*redisstore.Store, *redis.Client) {
	benchStore.once.Do(func() {
		c := testenv.Redis(b)
		s, err := redisstore.NewStore(c, consumer.WithPrefix("idemkit-uibench-"+strconv.Itoa(os.Getpid())), consumer.WithScope("payments"),
			consumer.WithLease(time.Hour), consumer.WithCallTimeout(time.Minute))
		if err != nil {
			benchStore.err = err
			return
		}
		start := time.Now()
		ctx := context.Background()
		const batch = 1000
		claims := make([]consumer.Claim, 0, batch)
		settles := make([]consumer.Settlement, 0, batch)
		for base := 0; base < n; base += batch {
			claims = claims[:0]
			for i := base; i < min(base+batch, n); i++ {
				claims = append(claims, consumer.Claim{Key: consumer.Key(fmt.Sprintf("order-%07d", i)), Owner: "loader-" + strconv.Itoa(i), Start: true})
			}
			settles = settles[:0]
			for i, rep := range s.Begin(ctx, claims) {
				if !rep.Claimed() {
					benchStore.err = fmt.Errorf("claim %s: %+v", claims[i].Key, rep)
					return
				}
				if (base+i)%10 == 0 {
					continue // left started
				}
				st := consumer.Settlement{Key: claims[i].Key, Owner: claims[i].Owner, Ref: rep.Ref, Fence: rep.Fence, Attempts: rep.Attempts,
					Created: rep.Created, Fingerprint: rep.Fingerprint, Complete: true, Result: []byte(`{"charged":true}`)}
				if (base+i)%100 == 1 {
					st.Complete, st.Result, st.Permanent, st.Message = false, nil, true, "card declined"
				}
				settles = append(settles, st)
			}
			for i, rep := range s.Settle(ctx, settles) {
				if rep.Err != nil {
					benchStore.err = fmt.Errorf("settle %s: %w", settles[i].Key, rep.Err)
					return
				}
			}
		}
		b.Logf("loaded %d records in %v", n, time.Since(start).Truncate(time.Millisecond))
		benchStore.store, benchStore.c = s, c
	})
	if benchStore.err != nil {
		b.Fatal(benchStore.err)
	}
	return benchStore.store, benchStore.c
}

// BenchmarkPages measures the server time of the UI's pages on Redis with
// IDEMKIT_UI_BENCH_RECORDS records (default 1,000,000): the overview (a
// bounded count of WithSample records, default 2,000, as a view makes it before
// the first full count is done; and the view that shows the background full
// count), a 100-record page of the records, the same filtered to completed
// records, and a record's page.
// The floor lane is one SCAN step of COUNT 1000 with one pipeline of GET and
// PTTL for the keys it returns, done with go-redis directly: the least a
// 100-record page costs.
func BenchmarkPages(b *testing.B) {
	n := benchRecords()
	s, c := loadBench(b, n)
	in, err := admin.New(s)
	if err != nil {
		b.Fatal(err)
	}
	h, err := ui.New(in, ui.WithPrefix("/idemkit"), ui.WithCountEvery(0))
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	cached, err := ui.New(in, ui.WithPrefix("/idemkit"), ui.WithCountEvery(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer cached.Close()
	start := time.Now()
	for {
		rec := httptest.NewRecorder()
		cached.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/idemkit/", nil))
		if strings.Contains(rec.Body.String(), "Full count of "+strconv.Itoa(n)+" records") {
			break
		}
		if time.Since(start) > 10*time.Minute {
			b.Fatal("no full count in 10 minutes")
		}
		time.Sleep(100 * time.Millisecond) // polling for the background count, with the deadline above
	}
	fullCount := time.Since(start)
	b.Logf("the background full count of %d records was shown %v after the first view", n, fullCount.Truncate(time.Millisecond))
	page := func(path string) func(b *testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s: %d\n%s", path, rec.Code, rec.Body)
				}
			}
		}
	}
	b.Run("floor-scan-step", func(b *testing.B) {
		ctx := context.Background()
		match := s.Settings().Prefix + ":{payments:*"
		for b.Loop() {
			keys, _, err := c.Scan(ctx, 0, match, 1000).Result()
			if err != nil {
				b.Fatal(err)
			}
			pipe := c.Pipeline()
			for _, k := range keys {
				pipe.Get(ctx, k)
				pipe.PTTL(ctx, k)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("overview-sample", page("/idemkit/"))
	b.Run("overview-full-count-cached", func(b *testing.B) {
		for b.Loop() {
			rec := httptest.NewRecorder()
			cached.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/idemkit/", nil))
			if rec.Code != http.StatusOK {
				b.Fatalf("overview: %d", rec.Code)
			}
		}
		b.ReportMetric(fullCount.Seconds(), "s-full-count")
	})
	b.Run("records-100", page("/idemkit/records?limit=100"))
	b.Run("records-100-completed", page("/idemkit/records?limit=100&state=completed"))
	b.Run("record", page("/idemkit/record?scope=payments&key=order-0000003"))
}
