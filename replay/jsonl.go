package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// JSONLSource reads messages from a JSON Lines file, one JSON object a line:
//
//	{"key": "order-42", "payload": {"amount": 1999}, "time": "2026-11-20T08:00:00Z", "headers": {"a": "b"}}
//
// key is the idempotency key (required). payload is the message: a JSON string is
// taken as its text, any other JSON value as its JSON text exactly as the line
// holds it; payload_base64 gives binary payloads instead. time (RFC 3339) and
// headers are optional. Blank lines are skipped. A message's offset is its line
// number, from 1; its partition is "". A line that is not such an object is a
// message with a KeyErr saying what is wrong (counted INVALID, not run); the line
// number is the message's Offset, not repeated in the KeyErr.
type JSONLSource struct {
	name string
	r    *bufio.Reader
	c    io.Closer
	line int64
	eof  bool
}

// OpenJSONL opens the file at path.
func OpenJSONL(path string) (*JSONLSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("replay: open %s: %w", path, err)
	}
	abs, _ := filepath.Abs(path)
	return &JSONLSource{name: "jsonl:" + abs, r: bufio.NewReaderSize(f, 1<<16), c: f}, nil
}

// NewJSONL reads from r; name names it in reports and checkpoints.
func NewJSONL(name string, r io.Reader) *JSONLSource {
	return &JSONLSource{name: "jsonl:" + name, r: bufio.NewReaderSize(r, 1<<16)}
}

// Name is "jsonl:" and the file's absolute path.
func (s *JSONLSource) Name() string { return s.name }

// Close closes the file.
func (s *JSONLSource) Close() error {
	if s.c == nil {
		return nil
	}
	return s.c.Close()
}

type jsonLine struct {
	Key     *string           `json:"key"`
	Payload json.RawMessage   `json:"payload"`
	B64     *string           `json:"payload_base64"`
	Time    *time.Time        `json:"time"`
	Headers map[string]string `json:"headers"`
}

// Read returns up to max next messages.
func (s *JSONLSource) Read(ctx context.Context, max int) ([]Message, error) {
	if s.eof {
		return nil, io.EOF
	}
	var out []Message
	for len(out) < max {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		line, err := s.r.ReadBytes('\n')
		if len(line) > 0 {
			s.line++
			if t := bytes.TrimSpace(line); len(t) > 0 {
				out = append(out, s.parse(t))
			}
		}
		if errors.Is(err, io.EOF) {
			s.eof = true
			if len(out) == 0 {
				return nil, io.EOF
			}
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func (s *JSONLSource) parse(line []byte) Message {
	m := Message{Offset: s.line}
	var l jsonLine
	if err := json.Unmarshal(line, &l); err != nil {
		m.KeyErr = fmt.Errorf("not a JSON object: %v", err)
		return m
	}
	if l.Key == nil || *l.Key == "" {
		m.KeyErr = errors.New(`no "key"`)
	} else {
		m.Key = consumer.Key(*l.Key)
	}
	switch {
	case l.B64 != nil:
		p, err := base64.StdEncoding.DecodeString(*l.B64)
		if err != nil && m.KeyErr == nil {
			m.KeyErr = fmt.Errorf("payload_base64: %v", err)
		}
		m.Payload = p
	case len(l.Payload) > 0 && l.Payload[0] == '"':
		var str string
		_ = json.Unmarshal(l.Payload, &str)
		m.Payload = []byte(str)
	default:
		m.Payload = []byte(l.Payload)
	}
	if l.Time != nil {
		m.Time = *l.Time
	}
	m.Headers = l.Headers
	return m
}

// CompactJSON is a canonical form for WithCanonical: the payload with the
// insignificant whitespace of JSON removed (json.Compact), for archives that
// pretty-printed or re-indented payloads the live consumer saw compact. A payload
// that is not JSON is an error (the message is counted INVALID).
func CompactJSON(m Message) ([]byte, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, m.Payload); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
