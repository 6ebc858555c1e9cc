package nethttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/observe"
)

// Middleware guards HTTP handlers with the Idempotency-Key header. Create it with
// New; wrap handlers with Handler. It is safe for concurrent use.
type Middleware struct {
	store     consumer.Store
	cfg       config
	log       *slog.Logger
	codec     consumer.Codec
	jsonCodec bool
	maxResult int
}

// httpStore is the store as the middleware uses it: its execution settings
// (fingerprint, fail-open, wait) are the middleware's, its records and scripts
// the store's own, and every claim it sends carries consumer.Claim.ReadFirst.
//
// The hint is set here, not by the store or the engine, because only HTTP expects
// settled keys: a client sends a request again when it did not see the answer,
// and each such replay should cost a store one read of the record (the Redis
// store answers a completed key from one GET, with no script). Brokers deliver
// mostly new keys, where a read first would add a round trip to every message:
// the Kafka and RabbitMQ adapters keep the single SET NX of a new key.
type httpStore struct {
	consumer.Store
	s consumer.Settings
}

func (h httpStore) Settings() consumer.Settings { return h.s }

// Begin sends claims with ReadFirst set, on a copy: the caller's slice is its own.
func (h httpStore) Begin(ctx context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	hinted := make([]consumer.Claim, len(claims))
	copy(hinted, claims)
	for i := range hinted {
		hinted[i].ReadFirst = true
	}
	return h.Store.Begin(ctx, hinted)
}

// New returns the middleware on store: any consumer.Store (store/redis, store/postgres,
// store/dynamodb, store/memory). The store must have its own scope
// (consumer.WithScope("payments-api")), and WithScope is required. It fails with
// ErrConfig when an option is out of range, saying which.
func New(store consumer.Store, opts ...Option) (*Middleware, error) {
	if store == nil {
		return nil, configError("nil store: pass a store from idemkit/store/redis, store/postgres, store/dynamodb or store/memory")
	}
	cfg := defaults()
	waitSet := false
	for _, o := range opts {
		if o == nil {
			return nil, configError("nil option")
		}
		if _, ok := o.(waitOpt); ok {
			waitSet = true
		}
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := store.Settings()
	if err := s.CheckScope(); err != nil {
		return nil, configError("%w", err)
	}
	if !waitSet {
		cfg.wait = s.WaitInProgress
	}
	tuned := s
	tuned.Fingerprint, tuned.FailOpen, tuned.WaitInProgress = cfg.fingerprint, s.FailOpen || cfg.failOpen, cfg.wait
	m := &Middleware{store: httpStore{Store: store, s: tuned}, cfg: cfg, log: cfg.logger, codec: s.Codec, maxResult: s.MaxResultSize}
	switch {
	case cfg.maxBufferSet:
	case cfg.blobs != nil:
		m.cfg.maxBuffer = max(DefaultMaxBlobResponse, int64(s.MaxResultSize))
	default:
		m.cfg.maxBuffer = int64(s.MaxResultSize)
	}
	if m.log == nil {
		m.log = s.Logger
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	_, m.jsonCodec = s.Codec.(consumer.JSONCodec)
	return m, nil
}

// Handler wraps next: its type is func(http.Handler) http.Handler, so it plugs into
// chi, gorilla/mux and the standard mux as it is.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	if next == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.writeProblem(w, http.StatusInternalServerError, "internal-error", "The route has no handler (nethttp: Handler(nil)).", 0)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !m.cfg.methods[r.Method] {
		next.ServeHTTP(w, r)
		return
	}
	raw, err := m.readKey(r)
	if errors.Is(err, errNoKey) {
		if m.cfg.required != nil && m.cfg.required(r) {
			m.writeProblem(w, http.StatusBadRequest, "missing-key",
				`This operation requires an Idempotency-Key header: send Idempotency-Key: "<key>" with a new random key (a UUID) for each operation, and the same key when you retry it.`, 0)
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	if err != nil {
		var ke *KeyError
		errors.As(err, &ke)
		m.writeProblem(w, http.StatusBadRequest, ke.Code, ke.Reason+".", 0)
		return
	}
	scope, err := m.cfg.scope(r)
	if err != nil {
		m.log.Error("nethttp: the scope function failed", "err", err)
		m.writeProblem(w, http.StatusInternalServerError, "scope-failed", "The server could not tell which client sent this request.", 0)
		return
	}
	body, status, detail := m.readBody(r)
	if status != 0 {
		code := "unreadable-body"
		if status == http.StatusRequestEntityTooLarge {
			code = "body-too-large"
		}
		m.writeProblem(w, status, code, detail, 0)
		return
	}
	var payload []byte
	if m.cfg.fingerprint {
		if payload, err = m.fingerprint(r, body); err != nil {
			m.writeProblem(w, http.StatusBadRequest, "bad-fingerprint", "The request could not be fingerprinted: "+err.Error(), 0)
			return
		}
	}
	key := hashKey(scope, raw)
	ctx := r.Context()
	if m.cfg.detach {
		ctx = context.WithoutCancel(ctx)
	}
	ctx = observe.WithSource(ctx, consumer.SourceHTTP)
	var rec *recorder
	res := consumer.ExecuteIdempotently(ctx, m.store, key, payload, func(hctx context.Context) (StoredResponse, error) {
		rec = newRecorder(w, m.cfg.passStreaming, m.cfg.maxBuffer)
		hr := r.WithContext(hctx)
		hr.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(rec, hr)
		return m.capture(hctx, r, key, rec)
	})
	m.respond(w, r, key, res, rec)
}

// respond maps the execution's result to the response.
func (m *Middleware) respond(w http.ResponseWriter, r *http.Request, key consumer.Key, res consumer.Result[StoredResponse], rec *recorder) {
	var pe *consumer.PanicError
	switch {
	case errors.As(res.Err, &pe):
		// Recorded as a failed attempt; net/http (or a recoverer) takes it from here,
		// but its stack would be this line's: log the handler's own.
		if pe.Value != http.ErrAbortHandler {
			m.log.Error("nethttp: handler panicked", "key", string(key), "panic", pe.Value, "stack", string(pe.Stack))
		}
		panic(pe.Value)
	case res.Outcome == consumer.Success:
		rec.sendTo(w)
	case res.Outcome == consumer.Duplicate && res.Err == nil:
		m.replay(w, r, key, res.Value)
	case res.Outcome == consumer.Duplicate && (errors.Is(res.Err, consumer.ErrResultTooLarge) || errors.Is(res.Err, consumer.ErrUndecodableResult)):
		m.log.Error("nethttp: stored response unreadable", "key", string(key), "err", res.Err)
		m.writeProblem(w, http.StatusInternalServerError, "response-not-kept",
			"The operation for this Idempotency-Key completed, but its response was not kept.", 0)
	case res.Outcome == consumer.Duplicate || errors.Is(res.Err, consumer.ErrAttemptsExhausted):
		m.writeProblem(w, http.StatusInternalServerError, "key-failed", fmt.Sprintf(
			"The operation for this Idempotency-Key failed on every allowed attempt (%d) and will not run again with this key.", res.Attempt), 0)
	case res.Outcome == consumer.InProgress:
		m.writeProblem(w, http.StatusConflict, "key-in-progress",
			"A request with this Idempotency-Key is being processed; retry with the same key after Retry-After.", m.cfg.retryAfter)
	case errors.Is(res.Err, consumer.ErrPayloadConflict):
		m.writeProblem(w, http.StatusUnprocessableEntity, "key-reused",
			"This Idempotency-Key was used with a different request (method, path, query or body); a key must not be reused across different requests.", 0)
	case rec != nil && rec.refused != "":
		m.writeProblem(w, http.StatusInternalServerError, "streaming-refused",
			"This operation streams its response, which cannot be stored whole for Idempotency-Key replays; the request was not recorded.", 0)
	case rec != nil && rec.passing:
		// already sent, unguarded
	case rec != nil:
		// The handler ran and its response was not stored: not kept by the policy,
		// or the store could not record it. The client gets what the handler said.
		if !errors.Is(res.Err, consumer.ErrAbandoned) {
			m.log.Warn("nethttp: the handler's response could not be stored", "key", string(key), "err", res.Err)
		}
		rec.sendTo(w)
	case errors.Is(res.Err, consumer.ErrStoreUnavailable):
		m.log.Warn("nethttp: idempotency store unavailable: request refused", "key", string(key), "err", res.Err)
		m.writeProblem(w, http.StatusServiceUnavailable, "store-unavailable",
			"The idempotency store cannot be reached; retry with the same key after Retry-After.", m.cfg.retryAfter)
	default:
		m.log.Error("nethttp: request failed", "key", string(key), "err", res.Err)
		m.writeProblem(w, http.StatusInternalServerError, "internal-error", "The request could not be processed.", 0)
	}
}

// readBody reads the whole request body, up to the limit; on failure it returns
// the status and the problem's detail.
func (m *Middleware) readBody(r *http.Request) (body []byte, status int, detail string) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, 0, ""
	}
	if r.ContentLength > m.cfg.maxBody {
		return nil, http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"The request body is %d bytes; this operation takes at most %d.", r.ContentLength, m.cfg.maxBody)
	}
	buf := bytes.NewBuffer(make([]byte, 0, max(0, min(r.ContentLength, m.cfg.maxBody))+bytes.MinRead))
	n, err := buf.ReadFrom(io.LimitReader(r.Body, m.cfg.maxBody+1))
	switch {
	case n > m.cfg.maxBody:
		return nil, http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"The request body is over %d bytes, the most this operation takes.", m.cfg.maxBody)
	case err != nil:
		return nil, http.StatusBadRequest, fmt.Sprintf("The request body could not be read: %v.", err)
	}
	return buf.Bytes(), 0, ""
}

// hashKey is the record key of a client's key: SHA-256 over the scope and the key
// (length-prefixed), base64url. The client's key is never stored as it is.
func hashKey(scope, key string) consumer.Key {
	h := sha256.New()
	field(h, "idempotency-key/1")
	field(h, scope)
	field(h, key)
	var sum [sha256.Size]byte
	return consumer.Key(base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0])))
}
