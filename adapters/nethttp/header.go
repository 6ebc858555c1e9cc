package nethttp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// HeaderKey is the request header that carries the idempotency key, and
// HeaderReplayed the response header that marks a replayed response.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
)

// KeyError says why a request's Idempotency-Key header was refused; the client gets
// 400 with its text.
type KeyError struct {
	Code   string // missing-key, multiple-keys, malformed-key, invalid-key
	Reason string
}

func (e *KeyError) Error() string { return "nethttp: " + HeaderKey + ": " + e.Reason }

// errNoKey: the request carries no Idempotency-Key header.
var errNoKey = errors.New("no key")

// readKey returns the request's key: the header must appear once and hold one
// Structured Field Item (RFC 8941) whose value is a String; its parameters are
// parsed and ignored. With legacy, an unquoted value is taken as the key.
func (m *Middleware) readKey(r *http.Request) (string, error) {
	vals := r.Header.Values(HeaderKey)
	switch {
	case len(vals) == 0:
		return "", errNoKey
	case len(vals) > 1:
		return "", &KeyError{Code: "multiple-keys", Reason: fmt.Sprintf(
			"the request has %d Idempotency-Key header fields: send exactly one", len(vals))}
	}
	key, err := parseKeyField(vals[0], m.cfg.legacyKeys)
	if err != nil {
		return "", &KeyError{Code: "malformed-key", Reason: err.Error()}
	}
	switch {
	case len(key) < m.cfg.minKeyLen:
		return "", &KeyError{Code: "invalid-key", Reason: fmt.Sprintf(
			"the key is %d bytes: send at least %d (a UUID is a good key)", len(key), m.cfg.minKeyLen)}
	case len(key) > m.cfg.maxKeyLen:
		return "", &KeyError{Code: "invalid-key", Reason: fmt.Sprintf(
			"the key is %d bytes: send at most %d (a UUID is a good key)", len(key), m.cfg.maxKeyLen)}
	}
	if err := m.cfg.keyValidator(key); err != nil {
		return "", &KeyError{Code: "invalid-key", Reason: "the key is not valid: " + err.Error()}
	}
	return key, nil
}

// parseKeyField parses a field value holding an sf-string Item.
func parseKeyField(v string, legacy bool) (string, error) {
	p := &sfParser{s: strings.TrimLeft(v, " ")}
	if p.s == "" {
		return "", errors.New(`the value is empty: send the key as a quoted string, Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	}
	if p.s[0] != '"' {
		if legacy {
			return parseLegacyKey(strings.TrimRight(p.s, " \t"))
		}
		if strings.Contains(p.s, ",") {
			return "", errors.New(`the value is a list: send one key, as a quoted string`)
		}
		return "", errors.New(`the value is not a quoted string: send Idempotency-Key: "<key>" with the double quotes (RFC 8941 sf-string)`)
	}
	key, err := p.str()
	if err != nil {
		return "", err
	}
	if err := p.params(); err != nil {
		return "", err
	}
	p.skipSP()
	switch {
	case p.s == "":
		return key, nil
	case p.s[0] == ',':
		return "", errors.New(`the value is a list: send one key, as a quoted string`)
	default:
		return "", fmt.Errorf("unexpected %q after the key: send only the quoted key", p.s)
	}
}

// parseLegacyKey accepts an unquoted key: anything without separators.
func parseLegacyKey(v string) (string, error) {
	if i := strings.IndexAny(v, ",; \t\"\\"); i >= 0 {
		if v[i] == ',' {
			return "", errors.New(`the value is a list: send one key`)
		}
		return "", fmt.Errorf("character %q at offset %d: an unquoted key may not contain separators; quote it", v[i], i)
	}
	return v, nil
}

// sfParser parses the parts of RFC 8941 (section 4.2) that an Item needs.
type sfParser struct{ s string }

func (p *sfParser) skipSP() { p.s = strings.TrimLeft(p.s, " ") }

// str parses an sf-string: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE.
func (p *sfParser) str() (string, error) {
	if p.s == "" || p.s[0] != '"' {
		return "", errors.New("expected a quoted string")
	}
	var b strings.Builder
	for i := 1; i < len(p.s); i++ {
		c := p.s[i]
		switch {
		case c == '\\':
			i++
			if i == len(p.s) || (p.s[i] != '"' && p.s[i] != '\\') {
				return "", errors.New(`a backslash in a quoted string may only escape " or \`)
			}
			b.WriteByte(p.s[i])
		case c == '"':
			p.s = p.s[i+1:]
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("byte 0x%02x at offset %d: a quoted string holds only visible ASCII and spaces", c, i)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("the quoted string has no closing quote")
}

// params parses and discards parameters: *( ";" *SP key [ "=" bare-item ] ).
func (p *sfParser) params() error {
	for p.s != "" && p.s[0] == ';' {
		p.s = p.s[1:]
		p.skipSP()
		if err := p.paramKey(); err != nil {
			return err
		}
		if p.s != "" && p.s[0] == '=' {
			p.s = p.s[1:]
			if err := p.bareItem(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *sfParser) paramKey() error {
	if p.s == "" || !(isLCAlpha(p.s[0]) || p.s[0] == '*') {
		return errors.New("a parameter name must start with a lowercase letter or *")
	}
	i := 1
	for i < len(p.s) && (isLCAlpha(p.s[i]) || isDigit(p.s[i]) || strings.IndexByte("_-.*", p.s[i]) >= 0) {
		i++
	}
	p.s = p.s[i:]
	return nil
}

// bareItem parses and discards a parameter value: integer or decimal, string,
// token, byte sequence or boolean.
func (p *sfParser) bareItem() error {
	if p.s == "" {
		return errors.New("a parameter has '=' and no value")
	}
	c := p.s[0]
	switch {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		_, err := p.str()
		return err
	case c == '*' || isAlpha(c):
		i := 1
		for i < len(p.s) && (isTChar(p.s[i]) || p.s[i] == ':' || p.s[i] == '/') {
			i++
		}
		p.s = p.s[i:]
		return nil
	case c == ':':
		end := strings.IndexByte(p.s[1:], ':')
		if end < 0 {
			return errors.New("a byte sequence parameter has no closing ':'")
		}
		for _, b := range []byte(p.s[1 : end+1]) {
			if !(isAlpha(b) || isDigit(b) || b == '+' || b == '/' || b == '=') {
				return errors.New("a byte sequence parameter holds a character outside base64")
			}
		}
		p.s = p.s[end+2:]
		return nil
	case c == '?':
		if len(p.s) < 2 || (p.s[1] != '0' && p.s[1] != '1') {
			return errors.New("a boolean parameter must be ?0 or ?1")
		}
		p.s = p.s[2:]
		return nil
	}
	return fmt.Errorf("a parameter value cannot start with %q", c)
}

func (p *sfParser) number() error {
	i := 0
	if p.s[0] == '-' {
		i++
	}
	start, dot := i, -1
	for ; i < len(p.s); i++ {
		c := p.s[i]
		if c == '.' && dot < 0 && i > start {
			if i-start > 12 {
				return errors.New("a decimal parameter has more than 12 integer digits")
			}
			dot = i
			continue
		}
		if !isDigit(c) {
			break
		}
	}
	digits := i - start
	switch {
	case digits == 0:
		return errors.New("a numeric parameter has no digits")
	case dot < 0 && digits > 15:
		return errors.New("an integer parameter has more than 15 digits")
	case dot >= 0 && (i-dot-1 < 1 || i-dot-1 > 3):
		return errors.New("a decimal parameter needs 1 to 3 fractional digits")
	}
	p.s = p.s[i:]
	return nil
}

func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || ('A' <= c && c <= 'Z') }
func isDigit(c byte) bool   { return '0' <= c && c <= '9' }

// isTChar reports whether c is an RFC 9110 tchar.
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
