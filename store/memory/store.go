package memory

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// Store keeps records in this process's memory, with the same semantics as
// the Redis store (it passes the same conformance suite, and a randomized differential
// test compares the two answer by answer). Use it in unit tests and single-process
// tools; it guards nothing across processes. Its clock is the local clock, or
// the one WithClock gives. It is safe for concurrent use.
type Store struct {
	s     consumer.Settings
	clock func() time.Time // WithClock's, or time.Now

	mu      sync.Mutex
	records map[consumer.Key]*memRecord
	ops     int
}

type memRecord struct {
	state     string
	owner     string // started only
	fence     int64
	attempts  int
	fp        consumer.Fingerprint
	lease     int64 // deadline, ms; 0 when not running
	result    []byte
	dropped   string
	history   []consumer.AttemptError // newest first
	notes     []consumer.OperatorNote // operators' notes, newest first; every transition keeps them
	permanent bool
	locked    bool // the current claim was made under the key's lock
	counted   bool // the current claim is an attempt (consumer.Claim.Start, or marked since)
	created   int64
	updated   int64
	expires   int64 // ms
}

var _ consumer.Store = (*Store)(nil)

// NewStore returns an empty in-memory store. It fails with ErrInvalidConfig
// when an option is out of range. The prefix option is accepted and unused.
func NewStore(opts ...consumer.Option) (*Store, error) {
	s, err := consumer.NewSettings(opts...)
	if err != nil {
		return nil, err
	}
	clock, err := clockOf(s)
	if err != nil {
		return nil, err
	}
	return &Store{s: s, clock: clock, records: make(map[consumer.Key]*memRecord)}, nil
}

// Settings returns the store's resolved options.
func (m *Store) Settings() consumer.Settings {
	if m == nil {
		return consumer.Settings{}
	}
	return m.s
}

// nowMillis is the store's clock in milliseconds.
func (m *Store) nowMillis() int64 { return m.clock().UnixMilli() }

// get returns the live record at key, dropping it when its retention has run out.
func (m *Store) get(key consumer.Key, now int64) *memRecord {
	r := m.records[key]
	if r != nil && r.expires <= now {
		delete(m.records, key)
		return nil
	}
	return r
}

// sweep drops expired records now and then, so keys never read again do not pile up.
func (m *Store) sweep(now int64) {
	m.ops++
	if m.ops%4096 != 0 {
		return
	}
	for k, r := range m.records {
		if r.expires <= now {
			delete(m.records, k)
		}
	}
}

// pushError puts msg first in r's history, as the Redis record does.
func (r *memRecord) pushError(now int64, msg string) {
	h := make([]consumer.AttemptError, 0, consumer.HistoryLen)
	h = append(h, consumer.AttemptError{Time: time.UnixMilli(now).Truncate(time.Second), Message: consumer.CapText(msg, consumer.MaxErrorText)})
	for _, e := range r.history {
		if len(h) == consumer.HistoryLen {
			break
		}
		if len(e.Message) > consumer.HistoryText {
			e.Message = e.Message[:consumer.HistoryText]
		}
		h = append(h, e)
	}
	r.history = h
}

func (r *memRecord) lastError() string {
	if len(r.history) == 0 {
		return ""
	}
	return r.history[0].Message
}

// claim makes r the started record of c's new attempt. A record without a
// fingerprint takes the claim's. charge says the claim is the next attempt; a
// takeover of a claim that was never counted keeps the attempt number it had.
func (r *memRecord) claim(c consumer.Claim, now, lease, ret int64, charge bool) {
	r.state, r.owner, r.locked, r.counted = "started", c.Owner, c.Locked, c.Start
	if r.fp.IsZero() {
		r.fp = c.Fingerprint
	}
	r.lease, r.updated, r.expires = now+lease, now, now+lease+ret
	r.fence++
	if charge {
		r.attempts++
	}
}

// exhaust fails r for good: its attempts are used up.
func (r *memRecord) exhaust(now, ret int64, msg string) {
	if msg != "" {
		r.pushError(now, msg)
	}
	r.state, r.owner, r.locked, r.permanent = "failed", "", false, false
	r.lease, r.updated, r.expires = 0, now, now+ret
}

// Begin claims records.
func (m *Store) Begin(ctx context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	if m == nil {
		return nilStore[consumer.ClaimReply](len(claims), func(err error) consumer.ClaimReply { return consumer.ClaimReply{Err: err} })
	}
	out := make([]consumer.ClaimReply, len(claims))
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i].Err = &consumer.StoreError{Op: "begin", Err: err}
		}
		return out
	}
	lease, ret := m.s.Lease.Milliseconds(), m.s.Retention.Milliseconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowMillis()
	m.sweep(now)
	for i, c := range claims {
		r := m.get(c.Key, now)
		if r == nil {
			r = &memRecord{fp: c.Fingerprint, created: now}
			m.records[c.Key] = r
			r.claim(c, now, lease, ret, true)
			out[i] = consumer.ClaimReply{Status: consumer.StatusAcquired, Fence: 1, Attempts: 1, Lease: m.s.Lease, Created: created(now),
				Fingerprint: r.fp}
			continue
		}
		rep := consumer.ClaimReply{Fence: r.fence, Attempts: r.attempts, Created: created(r.created)}
		switch {
		case !c.Fingerprint.IsZero() && !r.fp.IsZero() && r.fp != c.Fingerprint:
			rep.Status = consumer.StatusConflict
		case r.state == "completed":
			rep.Status, rep.Result, rep.Dropped = consumer.StatusCompleted, append([]byte(nil), r.result...), r.dropped
		case r.state == "failed":
			rep.Status, rep.Message, rep.Permanent = consumer.StatusFailed, r.lastError(), r.permanent
		case r.state == "forgotten": // an operator removed it: claimed afresh, its fence kept rising
			r.attempts, r.created, r.history, r.fp = 0, now, nil, consumer.Fingerprint{}
			r.claim(c, now, lease, ret, true)
			rep.Status, rep.Fence, rep.Attempts, rep.Lease, rep.Created = consumer.StatusAcquired, r.fence, r.attempts, m.s.Lease, created(now)
		case r.state == "retry" && r.attempts >= m.s.MaxAttempts:
			r.exhaust(now, ret, "")
			rep.Status, rep.Message = consumer.StatusExhausted, r.lastError()
		case r.state == "retry":
			r.claim(c, now, lease, ret, true)
			rep.Status, rep.Fence, rep.Attempts, rep.Lease = consumer.StatusAcquired, r.fence, r.attempts, m.s.Lease
		case r.owner == c.Owner: // started: the caller's own claim, asked again
			if c.Start && !r.counted {
				r.counted, r.updated = true, now
			}
			rep.Status, rep.Lease = consumer.StatusAcquired, time.Duration(max(r.lease-now, 0))*time.Millisecond
		case r.lease > now && !(c.Locked && r.locked): // started, live
			rep.Status, rep.Lease = consumer.StatusInProgress, time.Duration(r.lease-now)*time.Millisecond
		case r.counted && r.attempts >= m.s.MaxAttempts: // started, expired on the last attempt
			r.exhaust(now, ret, "lease expired during the last allowed attempt")
			rep.Status, rep.Message = consumer.StatusExhausted, r.lastError()
		default: // started, expired (or its lock holder is gone): take over
			r.claim(c, now, lease, ret, r.counted)
			rep.Status, rep.Fence, rep.Attempts, rep.Lease = consumer.StatusTakenOver, r.fence, r.attempts, m.s.Lease
		}
		if rep.Claimed() {
			rep.Fingerprint = r.fp
		}
		out[i] = rep
	}
	return out
}

// created is a record's creation time as records keep it: whole seconds.
func created(ms int64) time.Time { return time.UnixMilli(ms).Truncate(time.Second) }

// owns reports whether owner holds the running attempt at key.
func (m *Store) owns(key consumer.Key, owner string, now int64) *memRecord {
	r := m.get(key, now)
	if r == nil || r.state != "started" || r.owner != owner {
		return nil
	}
	return r
}

// Settle completes or fails claimed records.
func (m *Store) Settle(ctx context.Context, items []consumer.Settlement) []consumer.SettleReply {
	if m == nil {
		return nilStore[consumer.SettleReply](len(items), func(err error) consumer.SettleReply { return consumer.SettleReply{Err: err} })
	}
	out := make([]consumer.SettleReply, len(items))
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i].Err = &consumer.StoreError{Op: "settle", Err: err}
		}
		return out
	}
	ret := m.s.Retention.Milliseconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowMillis()
	for i, it := range items {
		r := m.owns(it.Key, it.Owner, now)
		if r == nil {
			if p := m.get(it.Key, now); p != nil && p.fence == it.Fence {
				// Sent again after a lost reply: answer as the first call did.
				switch {
				case it.Complete && p.state == "completed", !it.Complete && p.state == "retry":
					continue
				case !it.Complete && p.state == "failed":
					out[i].Terminal = true
					continue
				}
			}
			out[i].Err = &consumer.LeaseLostError{Key: it.Key, Fence: it.Fence, Reason: "settle: the claim belongs to another owner or has ended"}
			continue
		}
		if r.lease <= now { // settled after the lease ran out: the retention starts now
			r.expires = now + ret
		}
		r.lease, r.updated, r.owner, r.locked = 0, now, "", false
		switch {
		case it.Complete:
			r.state, r.result, r.dropped, r.history = "completed", append([]byte(nil), it.Result...), it.Dropped, nil
			if it.Dropped != "" {
				r.result = nil
			}
		case it.Permanent || r.attempts >= m.s.MaxAttempts:
			r.state, r.permanent = "failed", it.Permanent
			r.pushError(now, it.Message)
			out[i].Terminal = true
		default:
			r.state = "retry"
			r.pushError(now, it.Message)
		}
	}
	return out
}

// Extend renews the leases of running attempts.
func (m *Store) Extend(ctx context.Context, items []consumer.Owned) []error {
	return m.owned(ctx, "extend", items, func(r *memRecord, now int64) {
		r.lease = now + m.s.Lease.Milliseconds()
		r.expires = r.lease + m.s.Retention.Milliseconds()
	})
}

// Release gives claims back without a result; the abandoned attempt is not counted.
func (m *Store) Release(ctx context.Context, items []consumer.Owned) []error {
	return m.owned(ctx, "release", items, func(r *memRecord, now int64) {
		r.state, r.owner, r.locked = "retry", "", false
		r.lease, r.updated, r.expires = 0, now, now+m.s.Retention.Milliseconds()
		if r.attempts > 0 {
			r.attempts--
		}
	})
}

func (m *Store) owned(ctx context.Context, op string, items []consumer.Owned, change func(*memRecord, int64)) []error {
	if m == nil {
		return nilStore[error](len(items), func(err error) error { return err })
	}
	out := make([]error, len(items))
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i] = &consumer.StoreError{Op: op, Err: err}
		}
		return out
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowMillis()
	for i, it := range items {
		r := m.owns(it.Key, it.Owner, now)
		if r == nil {
			if p := m.get(it.Key, now); op == "release" && p != nil && p.state == "retry" && p.fence == it.Fence {
				continue // sent again after a lost reply: already released
			}
			out[i] = &consumer.LeaseLostError{Key: it.Key, Fence: it.Fence, Reason: op + ": the claim belongs to another owner or has ended"}
			continue
		}
		change(r, now)
	}
	return out
}

// Peek reads one record without changing it.
func (m *Store) Peek(ctx context.Context, key consumer.Key) (consumer.Record, error) {
	if m == nil {
		return consumer.Record{}, errNilStore
	}
	if err := key.Validate(); err != nil {
		return consumer.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return consumer.Record{}, &consumer.StoreError{Op: "peek", Err: err}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, _ := m.snapshot(key, m.nowMillis())
	return rec, nil
}
