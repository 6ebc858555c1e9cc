// Command http-payments is a small payments API behind the Idempotency-Key
// middleware (package adapters/nethttp): POST /charges creates a charge once per
// key, however often the client retries. README.md beside this file has a curl
// command for every status.
//
// The store is an in-process Redis (miniredis, running idemkit's own Lua scripts)
// unless IDEMKIT_REDIS_ADDR names a real one. Large responses (POST /reports) go to
// a file blob store in a temporary directory.
//
//	go run ./examples/http-payments            # listens on 127.0.0.1:8080
//	go run ./examples/http-payments -addr :9090
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// charge is the request body of POST /charges.
type charge struct {
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

var seq atomic.Int64

// createCharge creates a charge; amount 502 stands for the card processor being
// down, and ?slow=1 for a slow processor (to see 409).
func createCharge(w http.ResponseWriter, r *http.Request) {
	var c charge
	if err := json.NewDecoder(r.Body).Decode(&c); err != nil || c.Amount <= 0 || c.Currency == "" {
		http.Error(w, `{"error":"send {\"amount\": <positive cents>, \"currency\": \"eur\"}"}`, http.StatusBadRequest)
		return
	}
	if c.Amount == 502 {
		http.Error(w, `{"error":"card processor unavailable, retry"}`, http.StatusBadGateway)
		return
	}
	if r.URL.Query().Get("slow") != "" {
		select {
		case <-time.After(15 * time.Second):
		case <-r.Context().Done():
			return // the client left: nothing happened, the key is released
		}
	}
	if r.Context().Err() != nil {
		return // the claim was lost, or the client left: nothing happened
	}
	info, _ := consumer.InfoFromContext(r.Context())
	id := "ch_" + strconv.FormatInt(seq.Add(1), 10)
	// A real handler passes info.Fence to its database write (see package fence).
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/charges/"+id)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "amount": c.Amount, "currency": c.Currency,
		"attempt": info.Attempt, "fence": info.Fence})
}

// createReport answers with 2 MiB: over the store's result limit, so it is kept
// in the blob store and replayed from there.
func createReport(w http.ResponseWriter, _ *http.Request) {
	body := make([]byte, 2<<20)
	_, _ = rand.Read(body)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

// streamEvents flushes, which the middleware refuses (500): a streamed response
// cannot be stored whole. Serve such routes without the middleware.
func streamEvents(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, "data: hello\n\n")
	if err := http.NewResponseController(w).Flush(); err != nil {
		return // behind the middleware: nethttp.ErrStreamingRefused
	}
	_, _ = io.WriteString(w, "data: bye\n\n")
}

// authenticate stands in for a real authentication middleware: the bearer token
// names the client, and the middleware's scope function reads it back.
type clientKey struct{}

func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, `{"error":"send Authorization: Bearer <token>"}`, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, token)))
	})
}

func clientScope(r *http.Request) (string, error) {
	c, ok := r.Context().Value(clientKey{}).(string)
	if !ok {
		return "", errors.New("no authenticated client")
	}
	return c, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()
	if err := run(*addr); err != nil {
		log.Fatal(err)
	}
}

func run(addr string) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	redisAddr := os.Getenv("IDEMKIT_REDIS_ADDR")
	if redisAddr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		redisAddr = mr.Addr()
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	store, err := redisstore.NewStore(rdb, consumer.WithScope("payments-api"),
		consumer.WithMaxResultSize(64<<10), consumer.WithLogger(logger))
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "http-payments-blobs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	blobs, err := nethttp.NewFileBlobStore(dir)
	if err != nil {
		return err
	}
	idem, err := nethttp.New(store,
		nethttp.WithScope(clientScope),
		nethttp.WithKeyRequired(true),
		nethttp.WithCanonicalJSON(true),
		nethttp.WithBlobStore(blobs),
		nethttp.WithProblemBase("https://api.example.com/docs/idempotency"))
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("POST /charges", idem.Handler(http.HandlerFunc(createCharge)))
	mux.Handle("POST /reports", idem.Handler(http.HandlerFunc(createReport)))
	mux.Handle("POST /events", idem.Handler(http.HandlerFunc(streamEvents)))
	srv := &http.Server{Addr: addr, Handler: authenticate(mux), ReadHeaderTimeout: 5 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintf(os.Stderr, "http-payments on http://%s (Redis %s); see examples/http-payments/README.md\n", addr, redisAddr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
