package nethttp

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Problem is an RFC 9457 problem details object, the body of every response the
// middleware writes itself (Content-Type application/problem+json).
type Problem struct {
	// Type is base#Code with WithProblemBase, else "about:blank".
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Code names the problem for machines: missing-key, multiple-keys,
	// malformed-key, invalid-key, key-in-progress, key-reused, body-too-large,
	// unreadable-body, bad-fingerprint, store-unavailable, streaming-refused,
	// key-failed, response-not-kept, response-unavailable, scope-failed,
	// internal-error.
	Code string `json:"code"`
}

// Problem titles by code, used when WithProblemBase is set (with about:blank the
// title is the status's reason phrase, as RFC 9457 asks).
var problemTitles = map[string]string{
	"missing-key":          "Idempotency-Key is missing",
	"multiple-keys":        "More than one Idempotency-Key",
	"malformed-key":        "Idempotency-Key is malformed",
	"invalid-key":          "Idempotency-Key is not valid",
	"key-in-progress":      "A request is outstanding for this Idempotency-Key",
	"key-reused":           "Idempotency-Key is already used",
	"body-too-large":       "Request body too large",
	"unreadable-body":      "Request body could not be read",
	"bad-fingerprint":      "Request could not be fingerprinted",
	"store-unavailable":    "Idempotency store unavailable",
	"streaming-refused":    "Streaming response refused",
	"key-failed":           "The operation failed for this Idempotency-Key",
	"response-not-kept":    "The stored response was not kept",
	"response-unavailable": "The stored response is unavailable",
	"scope-failed":         "Client scope unknown",
	"internal-error":       "Internal error",
}

// writeProblem writes a problem response; retryAfter > 0 adds Retry-After.
func (m *Middleware) writeProblem(w http.ResponseWriter, status int, code, detail string, retryAfter time.Duration) {
	p := Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code}
	h := w.Header()
	if m.cfg.problemBase != "" {
		p.Type, p.Title = m.cfg.problemBase+"#"+code, problemTitles[code]
		h.Set("Link", "<"+m.cfg.problemBase+`>; rel="describedby"`)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(p) // strings and ints only: cannot fail
	body := buf.Bytes()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Language", "en")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(retryAfter.Seconds()))))
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
