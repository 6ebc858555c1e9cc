package consumer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
)

// ExecuteIdempotently runs fn at most once per key in the store's scope, however
// many times the message carrying key is delivered, and says what happened:
//
//   - Success: fn ran now and its result is stored for duplicates.
//   - Duplicate: the key was already done; Value is the stored result decoded (or
//     Err the stored terminal error).
//   - InProgress: another owner holds a live claim (see WithWaitInProgress).
//   - Error: Err says why; errors.Is matches ErrPayloadConflict, ErrAttemptsExhausted,
//     ErrLeaseLost, ErrStoreUnavailable, ErrPermanent, and the handler's own error.
//
// payload is fingerprinted (SHA-256) so that a key reused with another payload gives
// ErrPayloadConflict (see WithFingerprint). fn finds its key, attempt and fence with
// InfoFromContext; its context is cancelled, with a *LeaseLostError as the cause, if
// its claim is lost while it runs, and then its result is not stored. A handler error
// is retryable unless wrapped with Permanent. A panic in fn is recovered and recorded
// as a retryable failure (ErrHandlerPanic).
//
// The claim and the completion are one Redis round trip each; the lease is renewed
// in the background while fn runs.
func ExecuteIdempotently[T any](ctx context.Context, store Store, key Key, payload []byte,
	fn func(ctx context.Context) (T, error)) Result[T] {
	if fn == nil {
		return execute[T](ctx, store, []BatchItem{{Key: key, Payload: payload}}, nil, batchConfig{})[0]
	}
	h := func(ctx context.Context, _ int, _ BatchItem) (T, error) { return fn(ctx) }
	return execute(ctx, store, []BatchItem{{Key: key, Payload: payload}}, h, batchConfig{})[0]
}

// owner tokens: a random per-process prefix and a counter, unique per attempt.
var (
	ownerPrefix = func() string {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:]) + "-"
	}()
	ownerSeq atomic.Uint64
)

// newOwners makes n fresh owner tokens in one allocation and gives token i to
// set(i, token). The tokens' numbers are consecutive: the first is formatted
// once, and each next one counted up in place (next36), rather than formatted.
// Each token is cut from what the builder holds so far: a builder never changes
// what it has written (grown, it copies it), so the tokens cut before stay valid.
func newOwners(n int, set func(i int, owner string)) {
	if n <= 0 {
		return
	}
	first := ownerSeq.Add(uint64(n)) - uint64(n-1)
	var num [14]byte // a uint64 in base 36 is at most 13 digits, and one more on a carry
	d := strconv.AppendUint(num[:0], first, 36)
	var sb strings.Builder
	sb.Grow(n * (len(ownerPrefix) + len(d) + 1))
	at := 0
	for i := 0; i < n; i++ {
		if i > 0 {
			d = next36(d)
		}
		sb.WriteString(ownerPrefix)
		sb.Write(d)
		all := sb.String()
		set(i, all[at:])
		at = len(all)
	}
}

// next36 adds one to d, a number in base 36 as strconv writes it (digits 0-9,
// then a-z), in place; d grows by a digit on a carry out of its first, which its
// capacity must allow.
func next36(d []byte) []byte {
	for i := len(d) - 1; i >= 0; i-- {
		switch d[i] {
		case '9':
			d[i] = 'a'
			return d
		case 'z':
			d[i] = '0'
		default:
			d[i]++
			return d
		}
	}
	d = d[:len(d)+1]
	copy(d[1:], d)
	d[0] = '1'
	return d
}

// resolve turns a reply that is not a claim into a result.
func resolve[T any](s Settings, key Key, rep ClaimReply) Result[T] {
	r := Result[T]{Key: key, Attempt: rep.Attempts, Fence: rep.Fence}
	switch rep.Status {
	case StatusCompleted:
		r.Outcome = Duplicate
		if rep.Dropped != "" {
			r.ResultDropped = true
			if n, err := strconv.Atoi(rep.Dropped); err == nil {
				r.Err = &ResultTooLargeError{Size: n, Limit: s.MaxResultSize}
			} else {
				r.Err = fmt.Errorf("%w: the result could not be encoded when it was stored", ErrUndecodableResult)
			}
			return r
		}
		if err := unmarshal(s.Codec, rep.Result, &r.Value); err != nil {
			r.Err = fmt.Errorf("%w: key %q: %v", ErrUndecodableResult, string(key), err)
		}
	case StatusFailed:
		r.Outcome = Duplicate
		if rep.Permanent {
			r.Err = &StoredError{Msg: rep.Message, permanent: true}
		} else {
			r.Err = &ExhaustedError{Attempts: rep.Attempts, Last: &StoredError{Msg: rep.Message}}
		}
	case StatusExhausted:
		r.Outcome = Error
		r.Err = &ExhaustedError{Attempts: rep.Attempts, Last: &StoredError{Msg: rep.Message}}
	case StatusConflict:
		r.Outcome = Error
		r.Err = fmt.Errorf("%w: key %q", ErrPayloadConflict, string(key))
	case StatusInProgress:
		r.Outcome = InProgress
		r.LeaseLeft = rep.Lease
	default:
		r.Outcome = Error
		r.Err = fmt.Errorf("%w: unexpected claim status %v at key %q", ErrCorruptRecord, rep.Status, string(key))
	}
	return r
}

// fillSettlement fills st, which names a finished handler's claim, with its
// outcome; it reports whether the result was dropped (not kept).
func fillSettlement(s *Settings, st *Settlement, v any, herr error) (dropped bool) {
	if herr != nil && !errors.Is(herr, ErrAlreadyApplied) {
		st.Permanent = errors.Is(herr, ErrPermanent)
		st.Message = CapText(herr.Error(), MaxErrorText)
		return false
	}
	st.Complete = true
	data, err := marshal(s.Codec, v)
	switch {
	case err != nil:
		s.Logger.Error("consumer: result not kept: it could not be encoded", "key", string(st.Key), "err", err)
		st.Dropped = "unencodable"
	case len(data) > s.MaxResultSize:
		s.Logger.Warn("consumer: result not kept: over the size limit", "key", string(st.Key),
			"size", len(data), "limit", s.MaxResultSize)
		st.Dropped = strconv.Itoa(len(data))
	default:
		st.Result = data
	}
	return st.Dropped != ""
}

// markedComplete fills the result of an attempt whose handler recorded its own
// completion (MarkCompleted): a success, whatever the handler said after.
func markedComplete[T any](s Settings, r *Result[T], v T, herr error) {
	r.Outcome, r.Value, r.Err = Success, v, nil
	if herr != nil {
		s.Logger.Warn("consumer: the handler recorded its completion and then returned an error; the completion stands",
			"key", string(r.Key), "err", herr)
	}
}

// emptyObject is what JSONCodec makes of struct{}{}, the result of handlers that
// have none. It is shared: like every settlement's result, stores read it and
// keep no reference to it.
var emptyObject = []byte("{}")

// marshal encodes v, turning a panic in the codec (or in a MarshalJSON method)
// into an error that carries the stack.
func marshal(c Codec, v any) (data []byte, err error) {
	if _, ok := v.(struct{}); ok {
		if _, ok := c.(JSONCodec); ok {
			return emptyObject[:len(emptyObject):len(emptyObject)], nil
		}
	}
	defer func() {
		if p := recover(); p != nil {
			data, err = nil, fmt.Errorf("the codec panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return c.Marshal(v)
}

// unmarshal decodes data into v, turning a panic in the codec into an error.
func unmarshal(c Codec, data []byte, v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the codec panicked: %v", p)
		}
	}()
	return c.Unmarshal(data, v)
}

// finishResult fills r from the handler's outcome and the store's answer.
func finishResult[T any](r *Result[T], v T, herr error, rep SettleReply) {
	switch {
	case rep.Err != nil:
		r.Outcome = Error
		var ll *LeaseLostError
		if errors.As(rep.Err, &ll) {
			ll.Fence = r.Fence
		}
		if herr != nil {
			r.Err = fmt.Errorf("%w (handler error: %w)", rep.Err, herr)
		} else {
			r.Err = rep.Err
		}
	case herr != nil && errors.Is(herr, ErrAlreadyApplied):
		r.Outcome, r.Value = Duplicate, v
	case herr != nil:
		r.Outcome = Error
		r.Err = herr
		if rep.Terminal && !errors.Is(herr, ErrPermanent) {
			r.Err = &ExhaustedError{Attempts: r.Attempt, Last: herr}
		}
	default:
		r.Outcome, r.Value = Success, v
	}
}
