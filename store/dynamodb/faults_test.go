package dynamodb

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
)

// throttler is an HTTP proxy in front of the test server that answers the
// next n requests (all of them while n < 0) with DynamoDB's
// ProvisionedThroughputExceededException, as a table over its capacity does.
type throttler struct {
	srv       *httptest.Server
	n         atomic.Int64
	throttled atomic.Int64 // requests answered with the exception
	passed    atomic.Int64 // requests sent on to the server
}

func newThrottler(t *testing.T) *throttler {
	target, err := url.Parse(endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	th := &throttler{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transport
	th.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := th.n.Load(); n < 0 || (n > 0 && th.n.CompareAndSwap(n, n-1)) {
			th.throttled.Add(1)
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",` +
				`"message":"The level of configured provisioned throughput for the table was exceeded."}`))
			return
		}
		th.passed.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(th.srv.Close)
	return th
}

// TestThrottling: capacity errors are retried by the client with its backoff;
// when the retries give up, every call answers ERROR store-unavailable
// (Throttled), and no handler runs without a claim.
func TestThrottling(t *testing.T) {
	client(t) // the table
	th := newThrottler(t)
	const attempts = 4
	// The SDK's standard retryer, its backoff capped at 20ms so that the
	// retries fit in the call timeout (the default cap is 20s).
	c := newClient(th.srv.URL, func(o *ddb.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts, so.MaxBackoff, so.RateLimiter = attempts, 20*time.Millisecond, ratelimit.None
		})
	})
	s, err := New(c, Config{Table: testTable, ClockSkew: NoClockSkew}, consumer.WithPrefix(prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var runs atomic.Int32
	fn := func(ctx context.Context) (int, error) { runs.Add(1); return 7, nil }

	t.Run("AllThrottled", func(t *testing.T) {
		th.n.Store(-1)
		defer th.n.Store(0)
		before := th.throttled.Load()
		r := consumer.ExecuteIdempotently(ctx, s, "k1", nil, fn)
		if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrStoreUnavailable) || !Throttled(r.Err) || !r.Retryable() {
			t.Fatalf("throttled claim: %v %v (retryable %v), want ERROR store-unavailable, throttled", r.Outcome, r.Err, r.Retryable())
		}
		if runs.Load() != 0 {
			t.Fatal("a handler ran without a claim")
		}
		if n := th.throttled.Load() - before; n != attempts {
			t.Fatalf("the client sent the claim %d times, want %d (its retries with backoff)", n, attempts)
		}
		// A batch: every item answers the outage, none runs.
		items := make([]consumer.BatchItem, 20)
		for i := range items {
			items[i].Key = consumer.Key("batch-" + string(rune('a'+i)))
		}
		for i, r := range consumer.ExecuteBatch(ctx, s, items, func(ctx context.Context, _ int, _ consumer.BatchItem) (int, error) {
			runs.Add(1)
			return 0, nil
		}) {
			if r.Outcome != consumer.Error || !Throttled(r.Err) {
				t.Fatalf("batch item %d: %v %v", i, r.Outcome, r.Err)
			}
		}
		if runs.Load() != 0 {
			t.Fatal("a batch handler ran without a claim")
		}
		if _, err := s.Peek(ctx, "k1"); !Throttled(err) || !errors.Is(err, consumer.ErrStoreUnavailable) {
			t.Fatalf("peek: %v", err)
		}
	})

	t.Run("BoundedByTheCallTimeout", func(t *testing.T) {
		// With the SDK's default backoff (seconds under throttling), the call
		// timeout ends the retries: still a store outage, and nothing runs.
		slow, err := New(newClient(th.srv.URL), Config{Table: testTable, ClockSkew: NoClockSkew},
			consumer.WithPrefix(prefix(t)), consumer.WithCallTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		th.n.Store(-1)
		defer th.n.Store(0)
		began := time.Now()
		r := consumer.ExecuteIdempotently(ctx, slow, "k3", nil, fn)
		if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrStoreUnavailable) || runs.Load() != 0 {
			t.Fatalf("%v %v, %d runs; want ERROR store-unavailable and no run", r.Outcome, r.Err, runs.Load())
		}
		if took := time.Since(began); took > 5*time.Second {
			t.Fatalf("the claim took %v, over its 1s bound", took)
		}
	})

	t.Run("RetriedThrough", func(t *testing.T) {
		th.n.Store(attempts - 1) // the claim's first tries are throttled, its last passes
		before := th.throttled.Load()
		r := consumer.ExecuteIdempotently(ctx, s, "k2", nil, fn)
		if r.Outcome != consumer.Success || r.Value != 7 || runs.Load() != 1 {
			t.Fatalf("%v %v, %d runs; want SUCCESS after the client's retries, 1 run", r.Outcome, r.Err, runs.Load())
		}
		if n := th.throttled.Load() - before; n != attempts-1 {
			t.Fatalf("%d throttled requests, want %d", n, attempts-1)
		}
		if rec, _ := s.Peek(ctx, "k2"); rec.State != "completed" {
			t.Fatalf("record = %+v", rec)
		}
	})
}

// TestPartition: a store cut off from DynamoDB (a blackholed connection)
// answers every call within the call timeout as a store outage; nothing runs.
func TestPartition(t *testing.T) {
	client(t)
	u, _ := url.Parse(endpoint(t))
	proxy := testenv.NewFaultProxy(t, u.Host)
	c := newClient("http://"+proxy.Addr(), func(o *ddb.Options) { o.RetryMaxAttempts = 1 })
	s, err := New(c, Config{Table: testTable, ClockSkew: NoClockSkew}, consumer.WithPrefix(prefix(t)),
		consumer.WithCallTimeout(300*time.Millisecond), consumer.WithLease(500*time.Millisecond),
		consumer.WithWaitInProgress(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	proxy.Blackhole()
	began := time.Now()
	var runs atomic.Int32
	r := consumer.ExecuteIdempotently(ctx, s, "cut-off", nil, func(ctx context.Context) (int, error) { runs.Add(1); return 1, nil })
	if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrStoreUnavailable) || runs.Load() != 0 {
		t.Fatalf("%v %v, %d runs; want ERROR store-unavailable and no run", r.Outcome, r.Err, runs.Load())
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("the claim took %v: the call timeout did not bound it", took)
	}
	// The claim sent into the partition may reach the server once bytes move
	// again (its reply lost): the next delivery waits out that orphan's lease.
	proxy.Pass()
	r = consumer.ExecuteIdempotently(ctx, s, "cut-off", nil, func(ctx context.Context) (int, error) { runs.Add(1); return 1, nil })
	if r.Outcome != consumer.Success || runs.Load() != 1 {
		t.Fatalf("after the partition: %v %v, %d runs", r.Outcome, r.Err, runs.Load())
	}
}
