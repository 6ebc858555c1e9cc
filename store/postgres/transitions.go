package postgres

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// Begin claims records, in one transaction.
func (st *Store) Begin(ctx context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	out := make([]consumer.ClaimReply, len(claims))
	if st == nil {
		for i := range out {
			out[i].Err = errNil
		}
		return out
	}
	keys := keysOf(claims, func(c consumer.Claim) consumer.Key { return c.Key })
	for i, k := range keys {
		if err := k.Validate(); err != nil {
			out[i].Err = err
		}
	}
	s := st.s
	lease, ret := s.Lease.Milliseconds(), s.Retention.Milliseconds()
	err := st.transact(ctx, "begin", keys, func(b *batch) {
		now := b.now
		for i, c := range claims {
			if out[i].Err != nil {
				continue
			}
			r := b.get(i)
			if r == nil {
				r = &row{fp: c.Fingerprint, created: now}
				b.set(i, r)
				r.claim(c, now, lease, ret)
				out[i] = consumer.ClaimReply{Status: consumer.StatusAcquired, Fence: r.fence, Attempts: 1, Lease: s.Lease,
					Created: created(now), Fingerprint: r.fp}
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
			case r.state == "retry" && r.attempts >= s.MaxAttempts:
				r.exhaust(now, ret, "")
				rep.Status, rep.Message = consumer.StatusExhausted, r.lastError()
			case r.state == "retry":
				r.claim(c, now, lease, ret)
				rep.Status, rep.Fence, rep.Attempts, rep.Lease = consumer.StatusAcquired, r.fence, r.attempts, s.Lease
			case r.owner == c.Owner: // started: the caller's own claim, asked again
				rep.Status, rep.Lease = consumer.StatusAcquired, time.Duration(max(r.lease-now, 0))*time.Millisecond
			case r.lease > now && !(c.Locked && r.locked): // started, live
				rep.Status, rep.Lease = consumer.StatusInProgress, time.Duration(r.lease-now)*time.Millisecond
			case r.attempts >= s.MaxAttempts: // started, expired on the last attempt
				r.exhaust(now, ret, "lease expired during the last allowed attempt")
				rep.Status, rep.Message = consumer.StatusExhausted, r.lastError()
			default: // started, expired (or its lock holder is gone): take over
				r.claim(c, now, lease, ret)
				rep.Status, rep.Fence, rep.Attempts, rep.Lease = consumer.StatusTakenOver, r.fence, r.attempts, s.Lease
			}
			if rep.Claimed() {
				rep.Fingerprint = r.fp
			}
			out[i] = rep
		}
	})
	if err != nil {
		for i := range out {
			if out[i].Err == nil {
				out[i] = consumer.ClaimReply{Err: err}
			}
		}
	}
	return out
}

// Settle completes or fails claimed records, in one transaction.
func (st *Store) Settle(ctx context.Context, items []consumer.Settlement) []consumer.SettleReply {
	out := make([]consumer.SettleReply, len(items))
	if st == nil {
		for i := range out {
			out[i].Err = errNil
		}
		return out
	}
	s := st.s
	ret := s.Retention.Milliseconds()
	err := st.transact(ctx, "settle", keysOf(items, func(it consumer.Settlement) consumer.Key { return it.Key }), func(b *batch) {
		now := b.now
		for i, it := range items {
			r := b.get(i)
			if r == nil || r.state != "started" || r.owner != it.Owner {
				if r != nil && r.fence == it.Fence {
					// Sent again after a lost reply: answer as the first call did.
					switch {
					case it.Complete && r.state == "completed", !it.Complete && r.state == "retry":
						continue
					case !it.Complete && r.state == "failed":
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
			case it.Permanent || r.attempts >= s.MaxAttempts:
				r.state, r.permanent = "failed", it.Permanent
				r.pushError(now, it.Message)
				out[i].Terminal = true
			default:
				r.state = "retry"
				r.pushError(now, it.Message)
			}
		}
	})
	if err != nil {
		for i := range out {
			out[i] = consumer.SettleReply{Err: err}
		}
	}
	return out
}

// Extend renews the leases of running attempts.
func (st *Store) Extend(ctx context.Context, items []consumer.Owned) []error {
	return st.owned(ctx, "extend", items, func(r *row, now int64) {
		r.lease = now + st.s.Lease.Milliseconds()
		r.expires = r.lease + st.s.Retention.Milliseconds()
	})
}

// Release gives claims back without a result; the abandoned attempt is not counted.
func (st *Store) Release(ctx context.Context, items []consumer.Owned) []error {
	return st.owned(ctx, "release", items, func(r *row, now int64) {
		r.state, r.owner, r.locked = "retry", "", false
		r.lease, r.updated, r.expires = 0, now, now+st.s.Retention.Milliseconds()
		if r.attempts > 0 {
			r.attempts--
		}
	})
}

func (st *Store) owned(ctx context.Context, op string, items []consumer.Owned, change func(*row, int64)) []error {
	out := make([]error, len(items))
	if st == nil {
		for i := range out {
			out[i] = errNil
		}
		return out
	}
	err := st.transact(ctx, op, keysOf(items, func(it consumer.Owned) consumer.Key { return it.Key }), func(b *batch) {
		for i, it := range items {
			r := b.get(i)
			if r == nil || r.state != "started" || r.owner != it.Owner {
				if op == "release" && r != nil && r.state == "retry" && r.fence == it.Fence {
					continue // sent again after a lost reply: already released
				}
				out[i] = &consumer.LeaseLostError{Key: it.Key, Fence: it.Fence, Reason: op + ": the claim belongs to another owner or has ended"}
				continue
			}
			change(r, b.now)
		}
	})
	if err != nil {
		for i := range out {
			out[i] = err
		}
	}
	return out
}

// Peek reads one record without changing it.
func (st *Store) Peek(ctx context.Context, key consumer.Key) (consumer.Record, error) {
	if st == nil {
		return consumer.Record{}, errNil
	}
	if err := key.Validate(); err != nil {
		return consumer.Record{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, st.s.CallTimeout)
	defer cancel()
	var rec consumer.Record
	err := st.run(ctx, "peek", []consumer.Key{key}, false, func(b *batch) {
		rec = consumer.Record{Key: key, Now: time.UnixMilli(b.now)}
		r := b.get(0)
		if r == nil {
			return
		}
		rec.Found, rec.State, rec.Owner, rec.Fence, rec.Attempts = true, r.state, r.owner, r.fence, r.attempts
		rec.Fingerprint, rec.Dropped = r.fp, r.dropped
		if r.state == "completed" && r.dropped == "" {
			rec.Result = append([]byte(nil), r.result...)
		}
		rec.Error, rec.History = r.lastError(), append([]consumer.AttemptError(nil), r.history...)
		rec.Permanent, rec.Locked = r.state == "failed" && r.permanent, r.locked
		rec.Created, rec.Updated = created(r.created), created(r.updated)
		rec.TTL = time.Duration(r.expires-b.now) * time.Millisecond
		if r.state == "started" {
			rec.LeaseUntil = time.UnixMilli(r.lease)
			rec.Retention = st.s.Retention
		}
	})
	return rec, err
}
