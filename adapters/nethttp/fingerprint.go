package nethttp

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"hash"
	"io"
	"mime"
	"net/http"
	"strings"
)

// fingerprint returns the request's fingerprint: SHA-256 over the method, the
// escaped path, the raw query, the selected headers and the body (canonical JSON
// when asked), each length-prefixed so that fields cannot run into each other.
func (m *Middleware) fingerprint(r *http.Request, body []byte) ([]byte, error) {
	if m.cfg.fpFunc != nil {
		return m.cfg.fpFunc(r, body)
	}
	h := sha256.New()
	field(h, "http/1")
	field(h, r.Method)
	field(h, r.URL.EscapedPath())
	field(h, r.URL.RawQuery)
	for _, name := range m.cfg.fpHeaders {
		field(h, name)
		field(h, strings.Join(r.Header.Values(name), "\x00"))
	}
	if m.cfg.canonicalJSON && isJSON(r.Header.Get("Content-Type")) {
		if c, ok := canonicalJSON(body); ok {
			body = c
		}
	}
	fieldBytes(h, body)
	return h.Sum(nil), nil
}

func field(h hash.Hash, s string) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
	h.Write([]byte(s))
}

func fieldBytes(h hash.Hash, b []byte) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
	h.Write(b)
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// canonicalJSON re-encodes a JSON document with object members sorted and no
// insignificant whitespace; numbers keep their text. ok is false when body is not
// one JSON value.
func canonicalJSON(body []byte) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF { // trailing data: not one value
		return nil, false
	}
	out, err := json.Marshal(v) // maps are encoded with sorted keys
	if err != nil {
		return nil, false
	}
	return out, true
}
