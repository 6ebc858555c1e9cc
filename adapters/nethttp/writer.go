package nethttp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
)

// ErrStreamingRefused is what FlushError and Hijack return to a handler behind the
// middleware (unless WithUnguardedStreaming is on): a streamed or hijacked response
// cannot be stored whole, so it is refused rather than half-stored.
var ErrStreamingRefused = errors.New("nethttp: streaming and hijacking are refused behind Idempotency-Key: " +
	"serve this route without the middleware, or turn WithUnguardedStreaming on")

// recorder buffers a handler's response so that it can be stored whole before the
// client sees it, up to limit bytes of body: past that the response goes to the
// client as it is written (over), and its body is not kept. It implements
// http.Flusher and http.Hijacker itself (refusing, or switching to pass-through)
// and unwraps to the connection's writer for http.ResponseController's deadlines.
type recorder struct {
	w      http.ResponseWriter
	header http.Header
	status int // 0 until the handler writes the header
	body   bytes.Buffer
	limit  int64 // the most body bytes held (WithMaxResponseBuffer)
	pass   bool  // WithUnguardedStreaming

	refused  string // "flush" or "hijack" once refused
	passing  bool   // passing through: writes go straight to w
	hijacked bool
	over     bool  // the body went past limit: writes go straight to w, nothing is kept
	sent     int64 // body bytes sent to w once over
}

var (
	_ http.Flusher  = (*recorder)(nil)
	_ http.Hijacker = (*recorder)(nil)
)

func newRecorder(w http.ResponseWriter, pass bool, limit int64) *recorder {
	return &recorder{w: w, header: make(http.Header), pass: pass, limit: limit}
}

func (rec *recorder) Header() http.Header {
	if rec.passing || rec.over {
		return rec.w.Header()
	}
	return rec.header
}

func (rec *recorder) WriteHeader(code int) {
	if rec.passing {
		rec.w.WriteHeader(code)
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http does
	}
	if code < 200 || rec.status != 0 {
		return // informational responses are not forwarded; a second header is ignored
	}
	rec.status = code
}

func (rec *recorder) Write(b []byte) (int, error) {
	if rec.passing {
		return rec.w.Write(b)
	}
	if err := rec.bodyStarts(); err != nil {
		return 0, err
	}
	if !rec.over && int64(rec.body.Len()+len(b)) <= rec.limit {
		return rec.body.Write(b)
	}
	return rec.beyond(b)
}

// WriteString lets io.WriteString skip a conversion.
func (rec *recorder) WriteString(s string) (int, error) {
	if rec.passing {
		return rec.w.Write([]byte(s))
	}
	if err := rec.bodyStarts(); err != nil {
		return 0, err
	}
	if !rec.over && int64(rec.body.Len()+len(s)) <= rec.limit {
		return rec.body.WriteString(s)
	}
	return rec.beyond([]byte(s))
}

// bodyStarts sets the status a body implies (200 when none was written) and
// refuses a body the status does not allow.
func (rec *recorder) bodyStarts() error {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(rec.status) {
		return http.ErrBodyNotAllowed
	}
	return nil
}

// beyond writes b, which does not fit in the buffer: straight to the client,
// after the response's header and the part held so far. A response already
// refused (the client gets 500) keeps nothing more.
func (rec *recorder) beyond(b []byte) (int, error) {
	if rec.refused != "" {
		return len(b), nil
	}
	if !rec.over {
		rec.over = true
		rec.sniff()
		h := rec.w.Header()
		for k, v := range rec.header {
			h[k] = v
		}
		rec.w.WriteHeader(rec.finalStatus())
		held := rec.body.Bytes()
		rec.body = bytes.Buffer{}
		n, err := rec.w.Write(held)
		rec.sent += int64(n)
		if err != nil {
			return 0, err
		}
	}
	n, err := rec.w.Write(b)
	rec.sent += int64(n)
	return n, err
}

// Flush refuses (does nothing) or switches to pass-through.
func (rec *recorder) Flush() { _ = rec.FlushError() }

// FlushError refuses with ErrStreamingRefused or switches to pass-through and
// flushes; a response already going to the client (over the buffer) is flushed.
func (rec *recorder) FlushError() error {
	if rec.over {
		return http.NewResponseController(rec.w).Flush()
	}
	if !rec.pass {
		if rec.refused == "" {
			rec.refused = "flush"
		}
		return ErrStreamingRefused
	}
	if !rec.passing {
		rec.startPassing()
	}
	return http.NewResponseController(rec.w).Flush()
}

// Hijack refuses with ErrStreamingRefused or hands the connection over. A
// response already going to the client (over the buffer) cannot be hijacked.
func (rec *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if rec.over {
		return nil, nil, fmt.Errorf("%w: the response is already being sent", ErrStreamingRefused)
	}
	if !rec.pass {
		if rec.refused == "" {
			rec.refused = "hijack"
		}
		return nil, nil, ErrStreamingRefused
	}
	conn, brw, err := http.NewResponseController(rec.w).Hijack()
	if err == nil {
		rec.passing, rec.hijacked = true, true
	}
	return conn, brw, err
}

// Unwrap gives http.ResponseController the connection's writer (for read and
// write deadlines); flushing and hijacking stop here.
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.w }

// startPassing sends what was buffered and lets later writes through.
func (rec *recorder) startPassing() {
	h := rec.w.Header()
	for k, v := range rec.header {
		h[k] = v
	}
	rec.w.WriteHeader(rec.finalStatus())
	if rec.body.Len() > 0 {
		_, _ = rec.w.Write(rec.body.Bytes())
	}
	rec.body = bytes.Buffer{}
	rec.passing = true
}

func (rec *recorder) finalStatus() int {
	if rec.status == 0 {
		return http.StatusOK
	}
	return rec.status
}

// sniff sets the Content-Type that net/http would sniff from the body, so that the
// stored and the sent responses carry the same one.
func (rec *recorder) sniff() {
	_, typed := rec.header["Content-Type"]
	if !typed && rec.body.Len() > 0 && rec.header.Get("Content-Encoding") == "" && rec.header.Get("Transfer-Encoding") == "" {
		rec.header.Set("Content-Type", http.DetectContentType(rec.body.Bytes()))
	}
}

// sendTo writes the buffered response to w, with every header the handler set,
// unless it went to the client already (over the buffer).
func (rec *recorder) sendTo(w http.ResponseWriter) {
	if rec.over {
		return
	}
	rec.sniff()
	h := w.Header()
	for k, v := range rec.header {
		h[k] = v
	}
	status := rec.finalStatus()
	if bodyAllowed(status) && h.Get("Content-Length") == "" && h.Get("Transfer-Encoding") == "" {
		h.Set("Content-Length", strconv.Itoa(rec.body.Len()))
	}
	w.WriteHeader(status)
	if rec.body.Len() > 0 {
		_, _ = w.Write(rec.body.Bytes())
	}
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
