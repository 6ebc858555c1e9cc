package nethttp_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
)

// 200 concurrent clients each submit all of 50 charges, in their own order, some
// twice at once, retrying on 409 and on the upstream 502 that every fifth charge's
// first run answers. Every charge's side effect happens exactly once; every client
// ends with the one stored response of each charge (created once, replayed to the
// others), and in between sees only 409s and that one 502.
func TestConcurrentClientsExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000+ requests")
	}
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		const clients, keys = 200, 50
		var effects, upstream [keys]atomic.Int64
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k, _ := strconv.Atoi(r.URL.Query().Get("k"))
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond) // the call to the card processor
			if k%5 == 0 && upstream[k].CompareAndSwap(0, 1) {
				http.Error(w, "processor unavailable", http.StatusBadGateway)
				return
			}
			n := effects[k].Add(1)
			info, _ := consumer.InfoFromContext(r.Context())
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(map[string]any{"charge": k, "effect": n, "fence": info.Fence,
				"nonce": rand.Int64()})
		})
		srv := serve(t, newStore(t), handler)

		type final struct {
			body     string
			replayed bool
		}
		var (
			mu       sync.Mutex
			finals   [keys][]final
			conflict atomic.Int64
			bad      atomic.Int64
			badGates [keys]atomic.Int64
		)
		submit := func(k int) {
			q := req{Key: quoted("charge-" + strconv.Itoa(k)), Path: "/charges?k=" + strconv.Itoa(k), Body: `{"amount":` + strconv.Itoa(100+k) + `}`}
			for try := 0; ; try++ {
				r, err := srv.send(context.Background(), q)
				switch {
				case err != nil:
					t.Error(err)
					bad.Add(1)
					return
				case r.Status == http.StatusConflict:
					conflict.Add(1)
				case r.Status == http.StatusBadGateway:
					badGates[k].Add(1)
				case r.Status == http.StatusCreated:
					mu.Lock()
					finals[k] = append(finals[k], final{r.Body, r.Header.Get(nethttp.HeaderReplayed) == "true"})
					mu.Unlock()
					return
				default:
					t.Errorf("charge %d: unexpected %d %s", k, r.Status, r.Body)
					bad.Add(1)
					return
				}
				if try > 2000 {
					t.Errorf("charge %d: no final answer after %d tries", k, try)
					return
				}
				time.Sleep(time.Duration(1+rand.IntN(5)) * time.Millisecond)
			}
		}
		var wg sync.WaitGroup
		submitted := 0
		for c := 0; c < clients; c++ {
			order := rand.Perm(keys)
			twice := c%5 == 0 // a fifth of the clients submit every charge twice at once
			submitted += keys
			if twice {
				submitted += keys
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, k := range order {
					if twice {
						var inner sync.WaitGroup
						inner.Add(1)
						go func() { defer inner.Done(); submit(k) }()
						submit(k)
						inner.Wait()
					} else {
						submit(k)
					}
				}
			}()
		}
		wg.Wait()
		if bad.Load() > 0 {
			t.Fatalf("%d requests went wrong", bad.Load())
		}
		for k := 0; k < keys; k++ {
			if n := effects[k].Load(); n != 1 {
				t.Fatalf("charge %d: side effect ran %d times", k, n)
			}
			wantGates := int64(0)
			if k%5 == 0 {
				wantGates = 1
			}
			if badGates[k].Load() != wantGates {
				t.Fatalf("charge %d: %d clients saw the upstream 502, want %d", k, badGates[k].Load(), wantGates)
			}
			fresh := 0
			for _, f := range finals[k] {
				if f.body != finals[k][0].body {
					t.Fatalf("charge %d: two different responses: %q and %q", k, finals[k][0].body, f.body)
				}
				if !f.replayed {
					fresh++
				}
			}
			if fresh != 1 {
				t.Fatalf("charge %d: %d responses not marked replayed, want 1", k, fresh)
			}
		}
		total := 0
		for k := range finals {
			total += len(finals[k])
		}
		if total != submitted {
			t.Fatalf("%d final responses for %d submissions", total, submitted)
		}
		t.Logf("%d submissions, %d answered 409 on the way", submitted, conflict.Load())
	})
}
