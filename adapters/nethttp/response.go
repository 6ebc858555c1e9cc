package nethttp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"

	"github.com/idemkit/idemkit/consumer"
)

// StoredResponse is what the middleware stores for a key, with the store's codec
// (JSON by default): the status, the allow-listed headers and the body, or a
// reference to the blob that holds the body. Every field round-trips exactly, so a
// replay is the first response byte for byte (Date and Content-Length are set
// afresh, Set-Cookie is never stored).
type StoredResponse struct {
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// Blob names the blob that holds a body too large for the record.
	Blob *BlobRef `json:"blob,omitempty"`
	// NotKept says why the body was not kept (over the limit without a blob store,
	// or the blob could not be written); a replay answers 500 saying so.
	NotKept string `json:"not_kept,omitempty"`
}

// BlobRef names a body kept in the BlobStore, with its size and SHA-256 (hex) so
// that a replay can prove it sent the same bytes.
type BlobRef struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// errClientGone, errPassedThrough and notStoredError are reasons a handler's
// response is given back (consumer.Abandon) instead of stored.
var (
	errClientGone    = errors.New("nethttp: the client disconnected and the handler wrote no 2xx response")
	errPassedThrough = errors.New("nethttp: the response was streamed or hijacked unguarded")
)

// notStoredError: the store policy does not keep this status.
type notStoredError struct{ status int }

func (e notStoredError) Error() string {
	return "nethttp: status " + strconv.Itoa(e.status) + " is not stored by the store policy"
}

// capture turns the handler's buffered response into what is stored, or an
// Abandon error when nothing must be stored.
func (m *Middleware) capture(ctx context.Context, r *http.Request, key consumer.Key, rec *recorder) (StoredResponse, error) {
	switch {
	case rec.refused != "":
		return StoredResponse{}, consumer.Abandon(fmt.Errorf("%w (the handler called %s)", ErrStreamingRefused, rec.refused))
	case rec.passing:
		return StoredResponse{}, consumer.Abandon(errPassedThrough)
	}
	status := rec.finalStatus()
	if !m.cfg.detach && r.Context().Err() != nil && (rec.status == 0 || status > 299) {
		return StoredResponse{}, consumer.Abandon(errClientGone)
	}
	if !m.cfg.policy(status) {
		return StoredResponse{}, consumer.Abandon(notStoredError{status})
	}
	rec.sniff()
	resp := StoredResponse{Status: status, Header: m.replayHeaders(rec.header)}
	if rec.over {
		resp.NotKept = fmt.Sprintf("the body was over the %d bytes the server holds to keep a response; it was sent to the first client as it was written", rec.limit)
		m.log.Warn("nethttp: response body not kept: over the response buffer, streamed to the client",
			"key", string(key), "limit", rec.limit, "sent", rec.sent)
		return resp, nil
	}
	body := rec.body.Bytes()
	if len(body) == 0 {
		return resp, nil
	}
	info, _ := consumer.InfoFromContext(ctx)
	if info.Unguarded || m.fits(resp, body) { // unguarded: nothing is stored anyway
		resp.Body = body
		return resp, nil
	}
	if m.cfg.blobs == nil {
		resp.NotKept = fmt.Sprintf("the %d-byte body was over the store's result limit and no blob store is configured", len(body))
		m.log.Warn("nethttp: response body not kept: over the result limit, no blob store", "key", string(key), "size", len(body))
		return resp, nil
	}
	sum := sha256.Sum256(body)
	ref := &BlobRef{Name: string(key) + "-f" + strconv.FormatInt(info.Fence, 10), Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
	if err := m.cfg.blobs.Put(ctx, ref.Name, body); err != nil {
		// The operation ran: record it as done, say the body was lost, never run it again.
		resp.NotKept = "the body could not be written to the blob store: " + err.Error()
		m.log.Error("nethttp: response body not kept: blob write failed", "key", string(key), "size", len(body), "err", err)
		return resp, nil
	}
	resp.Blob = ref
	return resp, nil
}

// replayHeaders returns the headers of h on the replay allow-list, nil for none.
func (m *Middleware) replayHeaders(h http.Header) http.Header {
	var out http.Header
	for k, v := range h {
		if m.cfg.replayHeaders[k] {
			if out == nil {
				out = make(http.Header, 4)
			}
			out[k] = v
		}
	}
	return out
}

// fits reports whether resp with body inline stays within the store's result
// limit. For the JSON codec it bounds the encoded size without encoding (base64
// body, headers at worst escaped sixfold); for other codecs it encodes once.
func (m *Middleware) fits(resp StoredResponse, body []byte) bool {
	if m.jsonCodec {
		n := 64 + (len(body)+2)/3*4
		for k, vs := range resp.Header {
			n += 6 + 6*len(k)
			for _, v := range vs {
				n += 3 + 6*len(v)
			}
		}
		if n <= m.maxResult {
			return true
		}
		if (len(body)+2)/3*4 > m.maxResult {
			return false
		}
	}
	resp.Body = body
	data, err := m.codec.Marshal(resp)
	return err == nil && len(data) <= m.maxResult
}

// replay writes a stored response, marked with Idempotent-Replayed: true.
func (m *Middleware) replay(w http.ResponseWriter, r *http.Request, key consumer.Key, resp StoredResponse) {
	if resp.NotKept != "" {
		m.writeProblem(w, http.StatusInternalServerError, "response-not-kept", fmt.Sprintf(
			"The operation for this Idempotency-Key completed with status %d, but its response was not kept (%s). Use a new key only if you mean to run the operation again.",
			resp.Status, resp.NotKept), 0)
		return
	}
	var blob io.ReadCloser
	if resp.Blob != nil {
		err := errors.New("no blob store is configured")
		if m.cfg.blobs != nil {
			blob, err = m.cfg.blobs.Open(r.Context(), resp.Blob.Name)
		}
		if err != nil {
			m.log.Error("nethttp: stored response body unavailable", "key", string(key), "blob", resp.Blob.Name, "err", err)
			if errors.Is(err, fs.ErrNotExist) {
				m.writeProblem(w, http.StatusInternalServerError, "response-unavailable", fmt.Sprintf(
					"The operation for this Idempotency-Key completed with status %d, but its stored response body is gone.", resp.Status), 0)
			} else {
				m.writeProblem(w, http.StatusServiceUnavailable, "response-unavailable",
					"The stored response for this Idempotency-Key could not be read; retry with the same key.", m.cfg.retryAfter)
			}
			return
		}
		defer blob.Close()
	}
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	h.Set(HeaderReplayed, "true")
	if !bodyAllowed(resp.Status) {
		w.WriteHeader(resp.Status)
		return
	}
	if blob == nil {
		h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
		w.WriteHeader(resp.Status)
		_, _ = w.Write(resp.Body)
		return
	}
	h.Set("Content-Length", strconv.FormatInt(resp.Blob.Size, 10))
	w.WriteHeader(resp.Status)
	err := copyVerified(w, blob, resp.Blob)
	var werr writeError
	if errors.As(err, &werr) {
		return // the client went away
	}
	if err != nil {
		// The bytes are not the stored ones (or could not be read): cut the response
		// short, before its last bytes, rather than let the client take it for the
		// original.
		m.log.Error("nethttp: stored blob unreadable or not matching its record: response aborted", "key", string(key),
			"blob", resp.Blob.Name, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// copyVerified copies the blob to w, holding its last chunk back until its size and
// SHA-256 are proven to be the recorded ones.
func copyVerified(w io.Writer, blob io.Reader, ref *BlobRef) error {
	sum := sha256.New()
	src := io.LimitReader(blob, ref.Size+1)
	buf, held := make([]byte, 64<<10), make([]byte, 0, 64<<10)
	var total int64
	for {
		n, err := src.Read(buf)
		if n > 0 {
			sum.Write(buf[:n])
			total += int64(n)
			if len(held) > 0 {
				if _, err := w.Write(held); err != nil {
					return writeError{err}
				}
			}
			held = append(held[:0], buf[:n]...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if total != ref.Size || hex.EncodeToString(sum.Sum(nil)) != ref.SHA256 {
		return fmt.Errorf("blob has %d bytes with another checksum than the %d recorded", total, ref.Size)
	}
	if _, err := w.Write(held); err != nil {
		return writeError{err}
	}
	return nil
}

// writeError is a failure to write to the client, as opposed to reading the blob.
type writeError struct{ err error }

func (e writeError) Error() string { return "nethttp: writing the replay: " + e.err.Error() }
