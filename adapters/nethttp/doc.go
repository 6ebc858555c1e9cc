// Package nethttp is Idempotency-Key middleware for net/http, following the IETF
// draft "The Idempotency-Key HTTP Header Field" (draft-ietf-httpapi-idempotency-key-header),
// on any consumer.Store: Redis, the in-memory store, or any other implementation.
//
//	store, _ := redisstore.NewStore(rdb, consumer.WithScope("payments-api"))
//	mw, err := nethttp.New(store, nethttp.WithScope(userID), nethttp.WithKeyRequired(true))
//	mux.Handle("POST /charges", mw.Handler(charges))
//
// Handler has the type func(http.Handler) http.Handler, so chi, gorilla/mux and
// the standard mux take it as it is. Every guarded request runs through
// consumer.ExecuteIdempotently, so the handler runs under a claim with a lease
// renewed in the background, its context is cancelled if the claim is lost, and
// it reads its key, attempt and fence with consumer.InfoFromContext (pass the fence
// to writes that must reject a stale attempt).
//
// # Statuses
//
//	situation                                         status
//	------------------------------------------------  ------------------------------------------------
//	first request with a key                          the handler's own response
//	retry after completion                            the stored response, Idempotent-Replayed: true
//	retry while the first runs                        409 + Retry-After (or, WithWaitInProgress, the
//	                                                  stored response once the first finishes)
//	same key, different request (method, path,        422 (also while the first runs: 422 wins)
//	query, body, selected headers)
//	key missing on an operation that requires one     400
//	key malformed (not an sf-string, a list, two      400
//	header fields) or invalid (length, characters)
//	body over WithMaxBodySize                         413
//	store unreachable                                 503 + Retry-After (WithFailOpen: the handler runs
//	                                                  unguarded, nothing stored)
//	handler answers 5xx or 429                        the handler's own response, not stored; the key
//	                                                  is released and the attempt not counted
//	handler flushes or hijacks                        500, not stored, key released (or passed
//	                                                  through unguarded: WithUnguardedStreaming)
//	handler panics                                    the panic goes on to net/http; the attempt counts
//	key failed on every allowed attempt (crashes,     500
//	panics)
//	response over WithMaxResponseBuffer               the first client gets it whole, streamed; the
//	                                                  key is done, its body dropped: a retry gets
//	                                                  500 response-not-kept, never a second run
//	stored body lost (over the limit without a blob   500 (503 + Retry-After when the blob store
//	store, blob removed)                              cannot be read)
//
// Every response the middleware writes itself is an RFC 9457 problem
// (application/problem+json, see Problem) whose "code" member names the case; with
// WithProblemBase its "type" points to your documentation and a Link header with
// rel="describedby" is added, as the draft suggests.
//
// # The header
//
// Idempotency-Key is a Structured Field Item (RFC 8941) whose value is a String:
// Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324". Parameters are parsed
// and ignored; an unquoted value, a list, a comma or two header fields get 400.
// WithLegacyKeys also accepts an unquoted key from clients that predate the draft.
// The key is then checked against the published format: 1 to 255 bytes by default
// (WithKeyLength) of ASCII letters, digits and - _ . : ~ + / = (WithKeyValidator).
//
// Requests whose method is not guarded (default: all but POST, PUT, PATCH and
// DELETE) pass straight through, as do guarded requests without a key unless the
// operation requires one (WithKeyRequired, WithKeyRequiredFor).
//
// # Scope and storage
//
// Keys are stored as SHA-256 over the client's scope (WithScope: the
// authenticated user, tenant or API key) and the key, so one client can never
// read another's stored response, and a raw key is never stored or logged. The
// store itself must have its own scope (consumer.WithScope), so two services on one
// Redis keep separate records. Records live for the store's retention
// (consumer.WithRetention, 24h by default): publish it as the key's validity.
//
// The middleware's claims carry consumer.Claim.ReadFirst: it expects keys it has
// seen, since clients send a request again when they missed its answer. The Redis
// store then reads the record first, and a replay of a completed (or failed) key
// costs it one GET and no script; a new key costs one round trip more than a
// broker message's claim (the read, then the SET NX). Other stores ignore the hint.
//
// The fingerprint is SHA-256 over the method, the escaped path, the raw query and
// the body; WithFingerprintHeaders adds headers, WithCanonicalJSON ignores
// whitespace and member order in JSON bodies, WithFingerprintFunc replaces it. The
// middleware turns the store's fingerprinting on for its requests whatever the
// store's setting (WithFingerprint(false) turns it off).
//
// What is stored is a StoredResponse encoded with the store's codec: the status,
// the headers on the replay allow-list (Content-Type, Content-Encoding,
// Content-Language, Content-Disposition, Content-Location, Location, ETag,
// Last-Modified, Link, Cache-Control, Expires, Vary; WithReplayHeaders adds more,
// never Set-Cookie or Date) and the body (up to WithMaxResponseBuffer, see
// Decisions). A body that would take the record over
// the store's result limit (consumer.WithMaxResultSize) goes to the BlobStore
// (WithBlobStore; FileBlobStore ships) before the record is completed; the record
// keeps its name, size and SHA-256, and a replay streams it back, holding its last
// chunk until size and checksum match (a blob that does not match is cut short,
// never passed off as the response).
//
// # Decisions
//
//   - Which responses are stored is a StorePolicy: by default everything below
//     500 except 429. A 5xx or 429 is sent to the client and the claim is given
//     back with consumer.Abandon: the attempt is not counted and nothing is
//     recorded, so upstream failures never use up the key's attempts or turn it
//     into a stored failure. StoreEverything stores every response.
//   - The first client always gets the handler's own response, with all its
//     headers, even when it could not be stored (the store failed at completion,
//     or the lease was lost); the log says so. Replays carry the allow-list only.
//   - A streamed response cannot be stored whole: Flush, FlushError and Hijack are
//     refused (FlushError and Hijack return ErrStreamingRefused) and the client
//     gets 500, or, with WithUnguardedStreaming, the response passes through from
//     that point and nothing is stored. Either way the key is released. Serve
//     streaming routes without the middleware.
//   - A client that disconnects cancels the handler's context, as net/http does.
//     If the handler then returns without writing, or with a status above 299, the
//     key is released at once: the operation is taken not to have happened. A 2xx
//     written after the disconnect is stored for the retry. With
//     WithContinueOnDisconnect the handler's context outlives the client.
//   - A handler that panics: the attempt is recorded as failed (it counts), the
//     panic is logged with the handler's stack and raised again, so net/http or an
//     outer recoverer handles it as without the middleware. After the store's max
//     attempts the key answers 500 for good.
//   - A server that dies mid-request leaves a claim that the next request takes
//     over once its lease runs out (409 until then), with the next fence. A
//     handler whose side effect is not fenced or transactional runs again if the
//     process died after the side effect and before its response was recorded.
//   - A store that cannot be reached is not waited on beyond the Redis client's own
//     timeouts (go-redis: ReadTimeout and MaxRetries): the request gets 503. A claim
//     held up by a partition can still land after its caller gave up; the key
//     then answers 409 until that claim's lease runs out, and runs once after.
//   - The request body is read whole (up to WithMaxBodySize) before the claim, to
//     fingerprint it; the handler reads the same bytes.
//   - The response body is held in memory to be stored, up to
//     WithMaxResponseBuffer: by default the store's result limit without a blob
//     store (a larger body could not be kept in the record), 32 MiB (or that
//     limit if larger) with one. A handler that writes more is not cut off and
//     not held: from that point its response goes to the client as it is
//     written (the part held first, then every write, without a Content-Length
//     unless the handler set one), and a flush flushes. The operation ran, so the
//     key is recorded as done with its status and the body dropped; a retry gets
//     500 with the problem code response-not-kept, which names the first status
//     and says the operation completed, so that a client does not run it again
//     under a new key by mistake (the draft names no status for a response that
//     cannot be replayed; 500 is the one a lost body already gets). The client
//     may see the response before the key is recorded, and a retry in that
//     moment gets 409.
//   - Informational (1xx) responses written by the handler are dropped.
//   - The key in progress is answered at once with 409 by default; the bounded
//     wait (WithWaitInProgress) polls the store and ends early if the client goes.
//
// # Observers
//
// The store's observers (consumer.WithObserver: the Prometheus and OpenTelemetry
// plugins) see every guarded request as an execution of source "http"
// (consumer.SourceHTTP). What a broker adapter would dead-letter (a reused key, a
// key that failed for good) is answered with a final error here, and its action
// is labelled "reject" by the metric and trace plugins.
//
// The first request costs two store round trips (claim and completion), a replay
// one; `make bench-http` measures them.
package nethttp
