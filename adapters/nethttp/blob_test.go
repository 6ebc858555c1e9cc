package nethttp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
)

// bigHandler answers with a 3 MiB random body (a report, an export).
func bigHandler(runs *counter, body []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.n.Add(1)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("ETag", `"big"`)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body[:len(body)/2])
		_, _ = w.Write(body[len(body)/2:])
	})
}

func randomBody(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// A response over the store's result limit is kept in the blob store and replayed
// byte for byte; the record holds only the blob's name, size and checksum.
func TestLargeResponseReplayedFromBlobStore(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		dir := t.TempDir()
		blobs, err := nethttp.NewFileBlobStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		body := randomBody(t, 3<<20)
		store := newStore(t, consumer.WithMaxResultSize(64<<10))
		srv := serve(t, store, bigHandler(runs, body), nethttp.WithBlobStore(blobs))
		first := srv.do(t, req{Key: `"big-1"`, Body: `{}`})
		again := srv.do(t, req{Key: `"big-1"`, Body: `{}`})
		if first.Status != 201 || again.Status != 201 || again.Header.Get(nethttp.HeaderReplayed) != "true" || runs.load() != 1 {
			t.Fatalf("%d then %d (replayed %q), %d runs", first.Status, again.Status, again.Header.Get(nethttp.HeaderReplayed), runs.load())
		}
		if !bytes.Equal([]byte(first.Body), body) || !bytes.Equal([]byte(again.Body), body) {
			t.Fatalf("bodies differ from the handler's: first %d bytes, replay %d bytes, want %d identical", len(first.Body), len(again.Body), len(body))
		}
		if again.Header.Get("ETag") != `"big"` || again.Header.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("replayed headers %v", again.Header)
		}
		rec := peek(t, store, "alice", "big-1")
		var stored nethttp.StoredResponse
		if err := json.Unmarshal(rec.Result, &stored); err != nil {
			t.Fatal(err)
		}
		if len(rec.Result) > 1024 || stored.Blob == nil || stored.Blob.Size != int64(len(body)) || len(stored.Body) != 0 {
			t.Fatalf("record of %d bytes: %+v", len(rec.Result), stored.Blob)
		}

		// A blob that no longer matches its record is never passed off as the
		// response: the replay is cut short.
		path := filepath.Join(dir, stored.Blob.Name[:2], stored.Blob.Name)
		tampered := bytes.Clone(body)
		tampered[len(tampered)-1] ^= 0xff
		if err := os.WriteFile(path, tampered, 0o600); err != nil {
			t.Fatal(err)
		}
		if r, err := srv.send(context.Background(), req{Key: `"big-1"`, Body: `{}`}); err == nil {
			t.Fatalf("a tampered blob was replayed whole: %d, %d bytes", r.Status, len(r.Body))
		}
		// A blob swept away: 500 saying the stored response is gone, never a re-run.
		if n, err := blobs.Sweep(context.Background(), time.Nanosecond); err != nil || n != 1 {
			t.Fatalf("sweep removed %d: %v", n, err)
		}
		gone := srv.do(t, req{Key: `"big-1"`, Body: `{}`})
		if p := gone.problem(t); gone.Status != 500 || p.Code != "response-unavailable" || runs.load() != 1 {
			t.Fatalf("blob gone: %d %+v, %d runs", gone.Status, p, runs.load())
		}
	})
}

// Without a blob store a response over the limit still reaches its first client;
// the operation is recorded as done and retries get 500 saying the response was
// not kept (never a second run).
func TestLargeResponseWithoutBlobStore(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		body := randomBody(t, 256<<10)
		srv := serve(t, newStore(t, consumer.WithMaxResultSize(64<<10)), bigHandler(runs, body))
		first := srv.do(t, req{Key: `"big-2"`, Body: `{}`})
		again := srv.do(t, req{Key: `"big-2"`, Body: `{}`})
		if first.Status != 201 || !bytes.Equal([]byte(first.Body), body) {
			t.Fatalf("first: %d, %d bytes", first.Status, len(first.Body))
		}
		if p := again.problem(t); again.Status != 500 || p.Code != "response-not-kept" || runs.load() != 1 {
			t.Fatalf("retry: %d %+v, %d runs", again.Status, p, runs.load())
		}
	})
}

// Responses just under and just over the limit: inline below, blob above, both
// replayed exactly.
func TestResponseAtTheLimit(t *testing.T) {
	runs := &counter{}
	blobs, err := nethttp.NewFileBlobStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const limit = 4096
	store := memoryStore(t, consumer.WithMaxResultSize(limit))
	for _, n := range []int{1, 2000, 2900, 3000, 3100, 4096, 8192} {
		body := randomBody(t, n)
		srv := serve(t, store, bigHandler(runs, body), nethttp.WithBlobStore(blobs))
		key := quoted("limit-" + itoa(int64(n)))
		first := srv.do(t, req{Key: key, Body: `{}`})
		again := srv.do(t, req{Key: key, Body: `{}`})
		if !bytes.Equal([]byte(first.Body), body) || !bytes.Equal([]byte(again.Body), body) || again.Header.Get(nethttp.HeaderReplayed) != "true" {
			t.Fatalf("%d bytes: first %d, replay %d (%d)", n, len(first.Body), len(again.Body), again.Status)
		}
	}
	// Blob names are checked.
	if err := blobs.Put(context.Background(), "../escape", []byte("x")); err == nil {
		t.Fatal("a blob name with a path was accepted")
	}
	if _, err := blobs.Open(context.Background(), "ab"); err == nil {
		t.Fatal("a short blob name was accepted")
	}
	if _, err := nethttp.NewFileBlobStore(""); err == nil {
		t.Fatal("an empty blob directory was accepted")
	}
	rc, err := blobs.Open(context.Background(), "no-such-blob")
	if err == nil {
		_ = rc.Close()
	}
	if !os.IsNotExist(err) {
		t.Fatalf("missing blob: %v, want fs.ErrNotExist", err)
	}
}
