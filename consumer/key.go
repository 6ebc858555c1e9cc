package consumer

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"github.com/google/uuid"
)

// MaxKeyLen is the longest key accepted, in bytes.
const MaxKeyLen = 512

// Key names one logical operation ("charge order 42"), not one delivery.
//
// Derive keys with NewKey, or take one ready-made from a message with ParseKey.
type Key string

// NewKey derives a deterministic UUIDv5 key from a namespace and parts. The parts are
// length-prefixed before hashing, so ("ab", "c") and ("a", "bc") give different keys.
// Use one namespace per kind of operation (uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://example.com/charges"))).
func NewKey(namespace uuid.UUID, parts ...string) Key {
	n := 0
	for _, p := range parts {
		n += binary.MaxVarintLen64 + len(p)
	}
	buf := make([]byte, 0, n)
	for _, p := range parts {
		buf = binary.AppendUvarint(buf, uint64(len(p)))
		buf = append(buf, p...)
	}
	return Key(uuid.NewSHA1(namespace, buf).String())
}

// ParseKey turns a key that came with the message (an Idempotency-Key header, an AMQP
// MessageId, an event's idempotencyKey field) into a Key, unchanged. It fails with
// ErrInvalidKey when s is empty, longer than MaxKeyLen bytes, or not valid UTF-8.
func ParseKey(s string) (Key, error) {
	k := Key(s)
	return k, k.Validate()
}

// Validate reports whether k can be used: not empty, at most MaxKeyLen bytes, valid UTF-8.
func (k Key) Validate() error {
	switch {
	case k == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(k) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, over the %d-byte limit (derive a short key with NewKey)", ErrInvalidKey, len(k), MaxKeyLen)
	case !utf8.ValidString(string(k)):
		return fmt.Errorf("%w: key is not valid UTF-8", ErrInvalidKey)
	}
	return nil
}

// String returns the key as text.
func (k Key) String() string { return string(k) }
