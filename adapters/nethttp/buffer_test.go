package nethttp_test

import (
	"context"
	"crypto/sha256"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
)

// The body exportHandler writes: exportSize bytes, in writes of exportChunk.
const (
	exportSize  = 32 << 20
	exportChunk = 32 << 10
)

// exportHandler writes an exportSize body in exportChunk writes, counting its
// runs. On /flush-first it flushes before it writes (the middleware refuses); on
// /flush-last after (the response is on its way by then).
func exportHandler(t *testing.T, runs *counter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.n.Add(1)
		if r.URL.Path == "/flush-first" {
			w.(http.Flusher).Flush()
		}
		if r.URL.Path == "/flush-last" {
			defer func() {
				if err := http.NewResponseController(w).Flush(); err != nil {
					t.Errorf("flush after the body went past the buffer: %v", err)
				}
			}()
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		chunk := make([]byte, exportChunk)
		for off := 0; off < exportSize; off += exportChunk {
			for i := range chunk {
				chunk[i] = byte((off + i) * 7 >> 3)
			}
			if _, err := w.Write(chunk); err != nil {
				t.Errorf("write at %d: %v", off, err)
				return
			}
		}
	})
}

// exportSum is the SHA-256 of exportHandler's body.
func exportSum() [sha256.Size]byte {
	h := sha256.New()
	chunk := make([]byte, exportChunk)
	for off := 0; off < exportSize; off += exportChunk {
		for i := range chunk {
			chunk[i] = byte((off + i) * 7 >> 3)
		}
		h.Write(chunk)
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// streamed sends q and reads the response body through a hash, never holding it.
func (s *server) streamed(t *testing.T, q req) (status int, n int64, sum [sha256.Size]byte, head string) {
	t.Helper()
	if q.Path == "" {
		q.Path = "/export"
	}
	hr, err := http.NewRequestWithContext(context.Background(), http.MethodPost, s.URL+q.Path, strings.NewReader(q.Body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set(nethttp.HeaderKey, q.Key)
	hr.Header.Set("X-User", "alice")
	resp, err := s.client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	var first strings.Builder
	n, err = io.Copy(io.MultiWriter(h, &prefix{&first, 512}), resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	copy(sum[:], h.Sum(nil))
	return resp.StatusCode, n, sum, first.String()
}

// prefix keeps the first max bytes written to it.
type prefix struct {
	b   *strings.Builder
	max int
}

func (p *prefix) Write(b []byte) (int, error) {
	if room := p.max - p.b.Len(); room > 0 {
		p.b.Write(b[:min(room, len(b))])
	}
	return len(b), nil
}

// A response far over what the middleware holds in memory (by default the store's
// result limit, without a blob store) is streamed to the client whole once past
// it, with memory bounded; the key is recorded as done with its body dropped, and
// a replay gets 500 response-not-kept without running the handler again.
func TestResponseOverTheBufferIsStreamedAndNotKept(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		srv := serve(t, newStore(t, consumer.WithMaxResultSize(256<<10)), exportHandler(t, runs))
		want := exportSum()

		var status int
		var n int64
		var sum [sha256.Size]byte
		// Holding the body would allocate at least its 32 MiB (more as the buffer
		// doubles); streaming allocates the 256 KiB held and small buffers.
		if alloc := allocated(func() { status, n, sum, _ = srv.streamed(t, req{Key: quoted("export-1"), Body: `{}`}) }); alloc > exportSize/4 {
			t.Fatalf("the request allocated %d bytes for a %d-byte response: the body was held in memory", alloc, exportSize)
		}
		if status != http.StatusCreated || n != exportSize || sum != want {
			t.Fatalf("first request: status %d, %d bytes (want %d), checksum match %v", status, n, exportSize, sum == want)
		}

		status, _, _, body := srv.streamed(t, req{Key: quoted("export-1"), Body: `{}`})
		if status != http.StatusInternalServerError || !strings.Contains(body, `"code":"response-not-kept"`) ||
			!strings.Contains(body, "status 201") {
			t.Fatalf("replay: status %d, body %q; want 500 response-not-kept naming status 201", status, body)
		}
		if runs.load() != 1 {
			t.Fatalf("handler ran %d times, want 1", runs.load())
		}
	})
}

// allocated runs f and returns how many bytes the process allocated meanwhile.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// WithMaxResponseBuffer bounds what is held for a blob store too: a response
// past it is streamed (a flush then flushes), no blob is written, and a replay
// gets 500 response-not-kept. A handler that flushed first is refused (500
// streaming-refused, none of its body), holding no more than the buffer either.
func TestMaxResponseBuffer(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		dir := t.TempDir()
		blobs, err := nethttp.NewFileBlobStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		runs := &counter{}
		srv := serve(t, newStore(t), exportHandler(t, runs), nethttp.WithBlobStore(blobs), nethttp.WithMaxResponseBuffer(1<<20))
		want := exportSum()
		var status int
		var n int64
		var sum [sha256.Size]byte
		if alloc := allocated(func() { status, n, sum, _ = srv.streamed(t, req{Key: quoted("export-2"), Path: "/flush-last"}) }); alloc > exportSize/4 {
			t.Fatalf("the request allocated %d bytes for a %d-byte response", alloc, exportSize)
		}
		if status != http.StatusCreated || n != exportSize || sum != want {
			t.Fatalf("first request: status %d, %d bytes (want %d), checksum match %v", status, n, exportSize, sum == want)
		}
		status, _, _, body := srv.streamed(t, req{Key: quoted("export-2"), Path: "/flush-last"})
		if status != http.StatusInternalServerError || !strings.Contains(body, `"code":"response-not-kept"`) {
			t.Fatalf("replay: status %d, body %q; want 500 response-not-kept", status, body)
		}
		blobsWritten := 0
		_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				blobsWritten++
			}
			return nil
		})
		if blobsWritten != 0 || runs.load() != 1 {
			t.Fatalf("%d blobs written, %d runs; want none and 1", blobsWritten, runs.load())
		}

		if alloc := allocated(func() { status, n, _, body = srv.streamed(t, req{Key: quoted("export-3"), Path: "/flush-first"}) }); alloc > exportSize/4 {
			t.Fatalf("the refused request allocated %d bytes for a %d-byte response", alloc, exportSize)
		}
		if status != http.StatusInternalServerError || !strings.Contains(body, `"code":"streaming-refused"`) || n > 4096 {
			t.Fatalf("flushed first: status %d, %d bytes %q; want a 500 streaming-refused problem", status, n, body)
		}
		if runs.load() != 2 {
			t.Fatalf("%d runs, want 2", runs.load())
		}
	})
}
