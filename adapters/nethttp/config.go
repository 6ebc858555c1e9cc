package nethttp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"strings"
	"time"
)

// ErrConfig is matched by every configuration error of New.
var ErrConfig = errors.New("nethttp: invalid configuration")

func configError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// Defaults of the options.
const (
	DefaultMaxKeyLen   = 255
	DefaultMaxBodySize = 1 << 20
	DefaultRetryAfter  = time.Second
	// DefaultMaxBlobResponse is the default of WithMaxResponseBuffer with a blob
	// store: the most of a response body held in memory to be put in a blob.
	DefaultMaxBlobResponse = 32 << 20
)

// ScopeFunc names the client a request comes from (an authenticated user, a tenant,
// an API key's id). Keys are stored hashed together with it, so two clients that
// send the same key never meet. Run the middleware after authentication so that
// the scope function can read the identity from the request's context. An error
// is answered with 500 and logged: reject unauthenticated requests before the
// middleware.
type ScopeFunc func(r *http.Request) (string, error)

// Unscoped is a ScopeFunc for a service with one client: every request shares one
// scope, so any client that knows a key can read its stored response. Use it only
// when that is acceptable.
func Unscoped(*http.Request) (string, error) { return "", nil }

// FingerprintFunc computes a request's fingerprint from the request and its body
// (already read; do not read r.Body). Two requests with the same key and different
// fingerprints get 422.
type FingerprintFunc func(r *http.Request, body []byte) ([]byte, error)

// StorePolicy says whether a response with the given status is stored and replayed
// to retries of its key. A response that is not stored releases the key: the next
// request with it runs the handler again, and the attempt is not counted.
type StorePolicy func(status int) bool

// DefaultStorePolicy stores 2xx, 3xx and 4xx responses except 429 Too Many
// Requests: those describe the operation's outcome. 5xx and 429 describe a passing
// condition (an upstream failure, an overload, a rate limit), so they are sent to
// the client but not stored, and a retry runs the handler again.
func DefaultStorePolicy(status int) bool {
	return status < 500 && status != http.StatusTooManyRequests
}

// StoreEverything stores every final response, 5xx included: a retry gets the
// first answer whatever it was, and never runs the handler again.
func StoreEverything(int) bool { return true }

// Option configures the middleware. Every option states its default.
type Option interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	scope         ScopeFunc
	methods       map[string]bool
	required      func(*http.Request) bool
	legacyKeys    bool
	minKeyLen     int
	maxKeyLen     int
	keyValidator  func(string) error
	fingerprint   bool
	fpHeaders     []string
	canonicalJSON bool
	fpFunc        FingerprintFunc
	maxBody       int64
	policy        StorePolicy
	replayHeaders map[string]bool
	blobs         BlobStore
	maxBuffer     int64 // 0: from the store's result limit or DefaultMaxBlobResponse
	maxBufferSet  bool
	wait          time.Duration
	retryAfter    time.Duration
	failOpen      bool
	passStreaming bool
	detach        bool
	problemBase   string
	logger        *slog.Logger
	errs          []error
}

// defaultReplayHeaders are the response headers stored and replayed by default:
// those that describe the representation or the resource created. Set-Cookie,
// Date and the hop-by-hop headers are never stored.
var defaultReplayHeaders = []string{
	"Content-Type", "Content-Encoding", "Content-Language", "Content-Disposition", "Content-Location",
	"Location", "ETag", "Last-Modified", "Link", "Cache-Control", "Expires", "Vary",
}

// neverReplayed are refused by WithReplayHeaders: per-connection, per-session or
// per-response headers that a replay must not repeat.
var neverReplayed = map[string]bool{
	"Set-Cookie": true, "Date": true, "Content-Length": true, "Transfer-Encoding": true,
	"Connection": true, "Keep-Alive": true, "Trailer": true, "Upgrade": true,
	"Proxy-Authenticate": true, "Www-Authenticate": true, "Idempotent-Replayed": true,
}

func defaults() config {
	c := config{
		methods:       map[string]bool{http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true},
		minKeyLen:     1,
		maxKeyLen:     DefaultMaxKeyLen,
		keyValidator:  DefaultKeyValidator,
		fingerprint:   true,
		maxBody:       DefaultMaxBodySize,
		policy:        DefaultStorePolicy,
		replayHeaders: make(map[string]bool),
		retryAfter:    DefaultRetryAfter,
	}
	for _, h := range defaultReplayHeaders {
		c.replayHeaders[textproto.CanonicalMIMEHeaderKey(h)] = true
	}
	return c
}

// WithScope sets the function that names each request's client (see ScopeFunc).
// Required: there is no default, so that no service shares stored responses between
// clients by accident. Pass Unscoped for a service with one client.
func WithScope(fn ScopeFunc) Option { return optFunc(func(c *config) { c.scope = fn }) }

// WithMethods sets the methods the middleware guards; requests with other methods
// pass straight to the handler, with or without a key. Default POST, PUT, PATCH and
// DELETE (GET, HEAD, OPTIONS and TRACE are safe by definition).
func WithMethods(methods ...string) Option {
	return optFunc(func(c *config) {
		c.methods = make(map[string]bool, len(methods))
		for _, m := range methods {
			if m == "" || strings.ToUpper(m) != m {
				c.errs = append(c.errs, configError("WithMethods(%q): give methods in upper case, as on the wire", m))
			}
			c.methods[m] = true
		}
	})
}

// WithKeyRequired makes a guarded request without an Idempotency-Key header fail
// with 400 and a problem body, instead of passing to the handler unguarded. Wrap
// the routes that need a key with a middleware that has it on. Default off.
func WithKeyRequired(on bool) Option {
	return optFunc(func(c *config) {
		c.required = nil
		if on {
			c.required = func(*http.Request) bool { return true }
		}
	})
}

// WithKeyRequiredFor is WithKeyRequired decided per request (by path, by method).
// Default: no request requires a key.
func WithKeyRequiredFor(fn func(r *http.Request) bool) Option {
	return optFunc(func(c *config) { c.required = fn })
}

// WithLegacyKeys also accepts a key sent without the quotes of a structured-field
// string (Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324), as clients
// written before the header was standardised send it. The key format still
// applies, and a value with a comma, a semicolon, a space or a quote is still
// refused. Default off: only the quoted form is accepted.
func WithLegacyKeys(on bool) Option { return optFunc(func(c *config) { c.legacyKeys = on }) }

// WithKeyLength sets the shortest and longest key accepted, in bytes. Default 1 to
// 255. Raise the minimum (to 16, say) to refuse guessable keys.
func WithKeyLength(min, max int) Option {
	return optFunc(func(c *config) { c.minKeyLen, c.maxKeyLen = min, max })
}

// WithKeyValidator sets the check of a key's characters (its length is checked by
// WithKeyLength first). Its error is sent to the client in a 400 problem body, so
// say what is wrong. Default DefaultKeyValidator.
func WithKeyValidator(fn func(key string) error) Option {
	return optFunc(func(c *config) { c.keyValidator = fn })
}

// DefaultKeyValidator accepts keys made of ASCII letters, digits and - _ . : ~ + / =
// (UUIDs, ULIDs, base64 and base64url strings, prefixed ids such as order-42:retry).
func DefaultKeyValidator(key string) error {
	for i := 0; i < len(key); i++ {
		if !keyByte(key[i]) {
			return fmt.Errorf("character %q at offset %d is not allowed: use ASCII letters, digits and - _ . : ~ + / =", key[i], i)
		}
	}
	return nil
}

func keyByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return strings.IndexByte("-_.:~+/=", b) >= 0
}

// WithFingerprint turns the request fingerprint on or off for this middleware,
// whatever the store's own setting. When on, a key reused with a different
// request gets 422. Default on.
func WithFingerprint(on bool) Option { return optFunc(func(c *config) { c.fingerprint = on }) }

// WithFingerprintHeaders adds the named request headers' values to the
// fingerprint (for instance a header that selects an account). Default none:
// method, path, query and body only.
func WithFingerprintHeaders(names ...string) Option {
	return optFunc(func(c *config) {
		for _, n := range names {
			if n == "" {
				c.errs = append(c.errs, configError("WithFingerprintHeaders: empty header name"))
				continue
			}
			c.fpHeaders = append(c.fpHeaders, textproto.CanonicalMIMEHeaderKey(n))
		}
	})
}

// WithCanonicalJSON fingerprints a JSON body (a Content-Type of application/json
// or ending in +json) by its content, not its bytes: whitespace and the order of
// object members do not matter, so a client that re-encodes its request on retry
// does not get a false 422. A body that does not parse is fingerprinted as bytes.
// Default off.
func WithCanonicalJSON(on bool) Option { return optFunc(func(c *config) { c.canonicalJSON = on }) }

// WithFingerprintFunc replaces the fingerprint with fn's (WithFingerprintHeaders
// and WithCanonicalJSON are then unused). An error from fn is answered with 400
// and its text. Default: SHA-256 over method, path, query and body.
func WithFingerprintFunc(fn FingerprintFunc) Option {
	return optFunc(func(c *config) { c.fpFunc = fn })
}

// WithMaxBodySize sets the largest request body read for the fingerprint, in
// bytes; a larger body gets 413 and nothing runs. Default 1 MiB.
func WithMaxBodySize(n int64) Option { return optFunc(func(c *config) { c.maxBody = n }) }

// WithStorePolicy sets which responses are stored (see StorePolicy). Default
// DefaultStorePolicy; StoreEverything stores every response.
func WithStorePolicy(p StorePolicy) Option { return optFunc(func(c *config) { c.policy = p }) }

// WithReplayHeaders adds response headers to those stored and replayed. Default:
// Content-Type, Content-Encoding, Content-Language, Content-Disposition,
// Content-Location, Location, ETag, Last-Modified, Link, Cache-Control, Expires and
// Vary. Set-Cookie, Date, Content-Length, Www-Authenticate and hop-by-hop headers
// are refused.
func WithReplayHeaders(names ...string) Option {
	return optFunc(func(c *config) {
		for _, n := range names {
			k := textproto.CanonicalMIMEHeaderKey(n)
			if n == "" || neverReplayed[k] {
				c.errs = append(c.errs, configError("WithReplayHeaders(%q): this header is never replayed", n))
				continue
			}
			c.replayHeaders[k] = true
		}
	})
}

// WithBlobStore keeps response bodies too large for the store's result limit in
// blobs (see BlobStore, FileBlobStore); the record then holds the blob's name, size
// and checksum, and a replay streams the blob back byte for byte. Default none: a
// response over the limit is sent to its first client, the operation is recorded as
// done, and retries get 500 saying the response was not kept.
func WithBlobStore(b BlobStore) Option { return optFunc(func(c *config) { c.blobs = b }) }

// WithMaxResponseBuffer sets the most of a response body, in bytes, that the
// middleware holds in memory to store it. A handler whose body grows past n has
// its response sent to the client as it writes it from then on (the part held
// first), so memory stays bounded whatever it writes; its body is not kept: the
// key is recorded as done with its status, and a retry gets 500
// response-not-kept, never a second run. Default: without a blob store, the
// store's result limit (consumer.WithMaxResultSize, 1 MiB unless set), since a
// larger body could not be kept in the record anyway; with one,
// DefaultMaxBlobResponse (32 MiB) or the store's result limit if larger, since a
// blob is written from memory.
func WithMaxResponseBuffer(n int64) Option {
	return optFunc(func(c *config) { c.maxBuffer, c.maxBufferSet = n, true })
}

// WithWaitInProgress makes a request whose key is held by a running request wait
// up to d for that request to finish and then get its stored response (or run, if
// the first released its key or died), instead of an immediate 409. The wait polls
// the store (at most every 250ms) and ends early when the client disconnects.
// Default: the store's consumer.WithWaitInProgress, 0 unless set: 409 at once.
func WithWaitInProgress(d time.Duration) Option { return waitOpt(d) }

type waitOpt time.Duration

func (o waitOpt) apply(c *config) { c.wait = time.Duration(o) }

// WithRetryAfter sets the Retry-After of 409 (key in progress) and 503 (store
// unavailable) responses, rounded up to whole seconds. Default 1s.
func WithRetryAfter(d time.Duration) Option { return optFunc(func(c *config) { c.retryAfter = d }) }

// WithFailOpen runs the handler without a claim when the store cannot be reached
// (logged at Warn, consumer.Info.Unguarded set in the handler's context), instead
// of answering 503. Nothing is stored then, and a retry runs the handler again.
// Default off: fail closed. A store built with consumer.WithFailOpen fails open too.
func WithFailOpen(on bool) Option { return optFunc(func(c *config) { c.failOpen = on }) }

// WithUnguardedStreaming changes what happens when a handler flushes
// (http.Flusher, http.ResponseController) or hijacks its connection. By default
// the middleware refuses: Flush does nothing, FlushError and Hijack return
// ErrStreamingRefused, the claim is released and the client gets 500 with a
// problem body saying so, because a streamed response cannot be stored whole.
// With this option on, the response is passed through from that point on: the part
// buffered so far is sent, later writes go straight to the client, the connection
// may be hijacked, nothing is stored and the key is released for the next request.
// Default off.
func WithUnguardedStreaming(on bool) Option { return optFunc(func(c *config) { c.passStreaming = on }) }

// WithContinueOnDisconnect keeps the handler's context alive when the client
// disconnects, so that the operation runs to its end and its response is stored
// for the client's retry. Default off: the handler's context is cancelled as net/http
// does, and a handler that then stops without a 2xx response releases the key (see
// the package documentation).
func WithContinueOnDisconnect(on bool) Option { return optFunc(func(c *config) { c.detach = on }) }

// WithProblemBase sets a documentation URI for the middleware's problem responses:
// their "type" is base#code (base#missing-key, base#key-reused, ...) and a Link
// header with rel="describedby" points to base. Default "": type "about:blank",
// with the machine-readable code in the "code" member.
func WithProblemBase(uri string) Option { return optFunc(func(c *config) { c.problemBase = uri }) }

// WithLogger sets the logger. Default: the store's. Raw keys are never logged,
// only their hashes.
func WithLogger(l *slog.Logger) Option { return optFunc(func(c *config) { c.logger = l }) }

func (c *config) validate() error {
	if len(c.errs) > 0 {
		return c.errs[0]
	}
	switch {
	case c.scope == nil:
		return configError("no scope function: pass WithScope(func(r *http.Request) (string, error)) naming the authenticated client, or WithScope(nethttp.Unscoped) for a service with one client")
	case len(c.methods) == 0:
		return configError("WithMethods(): give at least one method")
	case c.minKeyLen < 1 || c.maxKeyLen < c.minKeyLen || c.maxKeyLen > 512:
		return configError("WithKeyLength(%d, %d): give 1 <= min <= max <= 512", c.minKeyLen, c.maxKeyLen)
	case c.keyValidator == nil:
		return configError("WithKeyValidator(nil): omit the option for DefaultKeyValidator")
	case c.maxBody < 1:
		return configError("WithMaxBodySize(%d): give at least 1 byte", c.maxBody)
	case c.maxBufferSet && c.maxBuffer < 1:
		return configError("WithMaxResponseBuffer(%d): give at least 1 byte", c.maxBuffer)
	case c.policy == nil:
		return configError("WithStorePolicy(nil): omit the option for DefaultStorePolicy")
	case c.wait < 0:
		return configError("WithWaitInProgress(%v): give 0 (answer 409 at once) or more", c.wait)
	case c.retryAfter < 0:
		return configError("WithRetryAfter(%v): give 0 or more", c.retryAfter)
	case strings.ContainsAny(c.problemBase, "#\" \t\r\n<>"):
		return configError("WithProblemBase(%q): give an absolute URI without a fragment", c.problemBase)
	}
	return nil
}
