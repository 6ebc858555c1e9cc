package consumer

import (
	"context"
	"sync"
	"time"
)

// MemoryStore keeps records in this process's memory, with the same semantics as
// RedisStore (it passes the same conformance suite). Use it in unit tests and
// single-process tools; it guards nothing across processes. Its clock is the local
// clock. It is safe for concurrent use.
type MemoryStore struct {
	s Settings

	mu      sync.Mutex
	records map[Key]*memRecord
	ops     int
}

type memRecord struct {
	state     string
	owner     string
	fence     int64
	attempts  int
	fp        string
	lease     int64 // deadline, ms; 0 when not running
	result    []byte
	dropped   string
	errText   string
	permanent bool
	locked    bool // the current claim was made under the key's lock
	created   int64
	updated   int64
	expires   int64 // ms
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty in-memory store. It fails with ErrInvalidConfig
// when an option is out of range. The prefix option is accepted and unused.
func NewMemoryStore(opts ...Option) (*MemoryStore, error) {
	s, err := newSettings(opts)
	if err != nil {
		return nil, err
	}
	return &MemoryStore{s: s, records: make(map[Key]*memRecord)}, nil
}

// Settings returns the store's resolved options.
func (m *MemoryStore) Settings() Settings {
	if m == nil {
		return Settings{}
	}
	return m.s
}

func nowMillis() int64 { return time.Now().UnixMilli() }

// get returns the live record at key, dropping it when its retention has run out.
func (m *MemoryStore) get(key Key, now int64) *memRecord {
	r := m.records[key]
	if r != nil && r.expires <= now {
		delete(m.records, key)
		return nil
	}
	return r
}

// sweep drops expired records now and then, so keys never read again do not pile up.
func (m *MemoryStore) sweep(now int64) {
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

// Begin claims records.
func (m *MemoryStore) Begin(ctx context.Context, claims []Claim) []ClaimReply {
	if m == nil {
		return nilStore[ClaimReply](len(claims), func(err error) ClaimReply { return ClaimReply{Err: err} })
	}
	out := make([]ClaimReply, len(claims))
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i].Err = &StoreError{Op: "begin", Err: err}
		}
		return out
	}
	lease, ret := m.s.Lease.Milliseconds(), m.s.Retention.Milliseconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	now := nowMillis()
	m.sweep(now)
	for i, c := range claims {
		r := m.get(c.Key, now)
		switch {
		case r == nil:
			m.records[c.Key] = &memRecord{state: "started", owner: c.Owner, fence: 1, attempts: 1, fp: c.Fingerprint,
				lease: now + lease, locked: c.Locked, created: now, updated: now, expires: now + lease + ret}
			out[i] = ClaimReply{Status: StatusAcquired, Fence: 1, Attempts: 1, Lease: m.s.Lease}
		case c.Fingerprint != "" && r.fp != "" && r.fp != c.Fingerprint:
			out[i] = ClaimReply{Status: StatusConflict, Fence: r.fence, Attempts: r.attempts}
		case r.state == "completed":
			out[i] = ClaimReply{Status: StatusCompleted, Fence: r.fence, Attempts: r.attempts,
				Result: append([]byte(nil), r.result...), Dropped: r.dropped}
		case r.state == "failed":
			out[i] = ClaimReply{Status: StatusFailed, Fence: r.fence, Attempts: r.attempts,
				Message: r.errText, Permanent: r.permanent}
		case r.state == "retry" && r.attempts >= m.s.MaxAttempts:
			r.state, r.permanent, r.updated, r.expires = "failed", false, now, now+ret
			out[i] = ClaimReply{Status: StatusExhausted, Fence: r.fence, Attempts: r.attempts, Message: r.errText}
		case r.state == "retry":
			r.state, r.owner, r.lease, r.updated, r.expires = "started", c.Owner, now+lease, now, now+lease+ret
			r.locked = c.Locked
			r.fence++
			r.attempts++
			out[i] = ClaimReply{Status: StatusAcquired, Fence: r.fence, Attempts: r.attempts, Lease: m.s.Lease}
		case r.owner == c.Owner: // started: the caller's own claim, asked again
			out[i] = ClaimReply{Status: StatusAcquired, Fence: r.fence, Attempts: r.attempts,
				Lease: time.Duration(max(r.lease-now, 0)) * time.Millisecond}
		case r.lease > now && !(c.Locked && r.locked): // started, live
			out[i] = ClaimReply{Status: StatusInProgress, Fence: r.fence, Attempts: r.attempts,
				Lease: time.Duration(r.lease-now) * time.Millisecond}
		case r.attempts >= m.s.MaxAttempts: // started, expired on the last attempt
			r.state, r.permanent, r.updated, r.expires = "failed", false, now, now+ret
			r.errText, r.lease = "lease expired during the last allowed attempt", 0
			out[i] = ClaimReply{Status: StatusExhausted, Fence: r.fence, Attempts: r.attempts, Message: r.errText}
		default: // started, expired (or its lock holder is gone): take over
			r.owner, r.lease, r.updated, r.expires = c.Owner, now+lease, now, now+lease+ret
			r.locked = c.Locked
			r.fence++
			r.attempts++
			out[i] = ClaimReply{Status: StatusTakenOver, Fence: r.fence, Attempts: r.attempts, Lease: m.s.Lease}
		}
	}
	return out
}

// owns reports whether owner holds the running attempt at key.
func (m *MemoryStore) owns(key Key, owner string, now int64) *memRecord {
	r := m.get(key, now)
	if r == nil || r.state != "started" || r.owner != owner {
		return nil
	}
	return r
}

// Settle completes or fails claimed records.
func (m *MemoryStore) Settle(ctx context.Context, items []Settlement) []SettleReply {
	if m == nil {
		return nilStore[SettleReply](len(items), func(err error) SettleReply { return SettleReply{Err: err} })
	}
	out := make([]SettleReply, len(items))
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i].Err = &StoreError{Op: "settle", Err: err}
		}
		return out
	}
	ret := m.s.Retention.Milliseconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	now := nowMillis()
	for i, it := range items {
		r := m.owns(it.Key, it.Owner, now)
		if r == nil {
			if p := m.get(it.Key, now); p != nil && p.owner == it.Owner && p.state != "started" {
				// Sent again after a lost reply: answer as the first call did.
				switch {
				case it.Complete && p.state == "completed", !it.Complete && p.state == "retry":
					continue
				case !it.Complete && p.state == "failed":
					out[i].Terminal = true
					continue
				}
			}
			out[i].Err = &LeaseLostError{Key: it.Key, Reason: "settle: the claim belongs to another owner or has ended"}
			continue
		}
		if r.lease <= now { // settled after the lease ran out: the retention starts now
			r.expires = now + ret
		}
		r.lease, r.updated = 0, now
		switch {
		case it.Complete:
			r.state, r.result, r.dropped = "completed", append([]byte(nil), it.Result...), it.Dropped
		case it.Permanent || r.attempts >= m.s.MaxAttempts:
			r.state, r.errText, r.permanent = "failed", it.Message, it.Permanent
			out[i].Terminal = true
		default:
			r.state, r.errText = "retry", it.Message
		}
	}
	return out
}

// Extend renews the leases of running attempts.
func (m *MemoryStore) Extend(ctx context.Context, items []Owned) []error {
	return m.owned(ctx, "extend", items, func(r *memRecord, now int64) {
		r.lease = now + m.s.Lease.Milliseconds()
		r.expires = r.lease + m.s.Retention.Milliseconds()
	})
}

// Release gives claims back without a result; the abandoned attempt is not counted.
func (m *MemoryStore) Release(ctx context.Context, items []Owned) []error {
	return m.owned(ctx, "release", items, func(r *memRecord, now int64) {
		r.state, r.lease, r.updated, r.expires = "retry", 0, now, now+m.s.Retention.Milliseconds()
		if r.attempts > 0 {
			r.attempts--
		}
	})
}

func (m *MemoryStore) owned(ctx context.Context, op string, items []Owned, change func(*memRecord, int64)) []error {
	if m == nil {
		return nilStore[error](len(items), func(err error) error { return err })
	}
	out := make([]error, len(items))
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i] = &StoreError{Op: op, Err: err}
		}
		return out
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := nowMillis()
	for i, it := range items {
		r := m.owns(it.Key, it.Owner, now)
		if r == nil {
			if p := m.get(it.Key, now); op == "release" && p != nil && p.owner == it.Owner && p.state == "retry" {
				continue // sent again after a lost reply: already released
			}
			out[i] = &LeaseLostError{Key: it.Key, Fence: it.Fence, Reason: op + ": the claim belongs to another owner or has ended"}
			continue
		}
		change(r, now)
	}
	return out
}

// Peek reads one record without changing it.
func (m *MemoryStore) Peek(ctx context.Context, key Key) (Record, error) {
	if m == nil {
		return Record{}, errNilStore
	}
	if err := key.Validate(); err != nil {
		return Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return Record{}, &StoreError{Op: "peek", Err: err}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := nowMillis()
	rec := Record{Key: key, Now: time.UnixMilli(now)}
	r := m.get(key, now)
	if r == nil {
		return rec, nil
	}
	rec.Found, rec.State, rec.Owner, rec.Fence, rec.Attempts = true, r.state, r.owner, r.fence, r.attempts
	rec.Fingerprint, rec.Result, rec.Dropped = r.fp, append([]byte(nil), r.result...), r.dropped
	rec.Error, rec.Permanent, rec.Locked = r.errText, r.state == "failed" && r.permanent, r.locked
	rec.Created, rec.Updated = time.UnixMilli(r.created), time.UnixMilli(r.updated)
	rec.TTL = time.Duration(r.expires-now) * time.Millisecond
	if r.lease > 0 {
		rec.LeaseUntil = time.UnixMilli(r.lease)
	}
	return rec, nil
}
