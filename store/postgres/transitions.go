package postgres

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/jackc/pgx/v5"
)

// maxRaces bounds how often one claim is sent again after a concurrent claim
// inserted its key first (each time, the next statement finds the row and decides
// from it, so a second round is all it takes in practice).
const maxRaces = 8

// Begin claims records: one statement per round of distinct keys (claimSQL).
func (st *Store) Begin(ctx context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	out := make([]consumer.ClaimReply, len(claims))
	if st == nil {
		for i := range out {
			out[i].Err = errNil
		}
		return out
	}
	hashes := make([][]byte, len(claims))
	var todo []int
	for i, c := range claims {
		if err := c.Key.Validate(); err != nil {
			out[i].Err = err
			continue
		}
		hashes[i] = st.hash(c.Key)
		todo = append(todo, i)
	}
	for race := 0; len(todo) > 0; race++ {
		if race == maxRaces {
			for _, i := range todo {
				out[i].Err = st.fail("begin", errRace)
			}
			break
		}
		var again []int
		for _, round := range roundsOf(todo, hashes) {
			lost, err := st.claim(ctx, claims, hashes, round, out)
			if err != nil {
				for _, i := range round {
					out[i] = consumer.ClaimReply{Err: err}
				}
				continue
			}
			again = append(again, lost...)
		}
		todo = again
	}
	return out
}

// errRace: a key's claim kept meeting concurrent inserts of it.
var errRace = errRaceError{}

type errRaceError struct{}

func (errRaceError) Error() string {
	return "the claim met concurrent claims of the same new key too often"
}

// roundsOf is rounds over the items idx (indexes into hashes).
func roundsOf(idx []int, hashes [][]byte) [][]int {
	hs := make([][]byte, len(idx))
	for j, i := range idx {
		hs[j] = hashes[i]
	}
	rs := rounds(hs)
	for _, r := range rs {
		for j := range r {
			r[j] = idx[r[j]]
		}
	}
	return rs
}

// claim runs claimSQL for the items round (distinct keys), fills their replies,
// and returns the items a concurrent claim beat to the insert.
func (st *Store) claim(ctx context.Context, claims []consumer.Claim, hashes [][]byte, round []int, out []consumer.ClaimReply) ([]int, error) {
	s := st.s
	n := len(round)
	ks, owners, fps, locked := make([][]byte, n), make([]string, n), make([][]byte, n), make([]bool, n)
	for j, i := range round {
		c := claims[i]
		ks[j], owners[j], locked[j] = hashes[i], c.Owner, c.Locked
		if !c.Fingerprint.IsZero() {
			fps[j] = append([]byte(nil), c.Fingerprint[:]...)
		}
	}
	var lost []int
	err := st.query(ctx, "begin", claimSQL, func(rows pgx.Rows) error {
		var (
			idx                          int64
			d, dropped, msg              string
			ok, permanent                bool
			fence, lease, now, createdMs int64
			attempts                     int32
			fp, result                   []byte
		)
		if err := rows.Scan(&idx, &d, &ok, &fence, &attempts, &lease, &now, &createdMs, &fp, &result, &dropped, &msg, &permanent); err != nil {
			return err
		}
		i := round[idx-1]
		if !ok {
			lost = append(lost, i)
			return nil
		}
		rep := consumer.ClaimReply{Fence: fence, Attempts: int(attempts), Created: created(createdMs)}
		switch d {
		case "fresh", "claim":
			rep.Status, rep.Lease = consumer.StatusAcquired, s.Lease
		case "takeover":
			rep.Status, rep.Lease = consumer.StatusTakenOver, s.Lease
		case "own":
			rep.Status, rep.Lease = consumer.StatusAcquired, time.Duration(max(lease-now, 0))*time.Millisecond
		case "busy":
			rep.Status, rep.Lease = consumer.StatusInProgress, time.Duration(lease-now)*time.Millisecond
		case "conflict":
			rep.Status = consumer.StatusConflict
		case "completed":
			rep.Status, rep.Result, rep.Dropped = consumer.StatusCompleted, result, dropped
		case "failed":
			rep.Status, rep.Message, rep.Permanent = consumer.StatusFailed, msg, permanent
		case "exhaust", "expire":
			rep.Status, rep.Message = consumer.StatusExhausted, msg
		}
		if rep.Claimed() {
			copy(rep.Fingerprint[:], fp)
		}
		out[i] = rep
		return nil
	}, ks, owners, fps, locked, s.Lease.Milliseconds(), s.Retention.Milliseconds(), s.MaxAttempts, s.Scope)
	return lost, err
}

// Settle completes or fails claimed records: one statement per round (settleSQL).
func (st *Store) Settle(ctx context.Context, items []consumer.Settlement) []consumer.SettleReply {
	out := make([]consumer.SettleReply, len(items))
	if st == nil {
		for i := range out {
			out[i].Err = errNil
		}
		return out
	}
	s := st.s
	hashes := st.hashes(keysOf(items, func(it consumer.Settlement) consumer.Key { return it.Key }))
	for _, round := range rounds(hashes) {
		n := len(round)
		ks, owners, fences := make([][]byte, n), make([]string, n), make([]int64, n)
		complete, results, dropped, msgs, perms := make([]bool, n), make([][]byte, n), make([]string, n), make([]string, n), make([]bool, n)
		for j, i := range round {
			it := items[i]
			ks[j], owners[j], fences[j], complete[j] = hashes[i], it.Owner, it.Fence, it.Complete
			results[j], dropped[j], perms[j] = it.Result, it.Dropped, it.Permanent
			msgs[j] = consumer.CapText(it.Message, maxError)
		}
		err := st.query(ctx, "settle", settleSQL, func(rows pgx.Rows) error {
			var idx, fence int64
			var set, was string
			var live bool
			if err := rows.Scan(&idx, &set, &was, &fence, &live); err != nil {
				return err
			}
			i := round[idx-1]
			it := items[i]
			switch {
			case set == "failed":
				out[i].Terminal = true
			case set != "":
			case live && fence == it.Fence && (it.Complete && was == "completed" || !it.Complete && was == "retry"):
				// sent again after a lost reply: answered as the first call was
			case live && fence == it.Fence && !it.Complete && was == "failed":
				out[i].Terminal = true
			default:
				out[i].Err = &consumer.LeaseLostError{Key: it.Key, Fence: it.Fence, Reason: "settle: the claim belongs to another owner or has ended"}
			}
			return nil
		}, ks, owners, fences, complete, results, dropped, msgs, perms, s.Retention.Milliseconds(), s.MaxAttempts)
		if err != nil {
			for _, i := range round {
				out[i] = consumer.SettleReply{Err: err}
			}
		}
	}
	return out
}

// Extend renews the leases of running attempts (extendSQL).
func (st *Store) Extend(ctx context.Context, items []consumer.Owned) []error {
	return st.owned(ctx, "extend", items, extendSQL, func(ks [][]byte, owners []string, _ []int64) []any {
		return []any{ks, owners, st.s.Lease.Milliseconds(), st.s.Retention.Milliseconds()}
	})
}

// Release gives claims back without a result; the abandoned attempt is not
// counted (releaseSQL).
func (st *Store) Release(ctx context.Context, items []consumer.Owned) []error {
	return st.owned(ctx, "release", items, releaseSQL, func(ks [][]byte, owners []string, fences []int64) []any {
		return []any{ks, owners, fences, st.s.Retention.Milliseconds()}
	})
}

// owned runs an owner compare-and-set statement (sql, with the arguments args
// makes of a round's keys, owners and fences) per round; an item is lost when its
// row was not changed and was not already in the asked-for state.
func (st *Store) owned(ctx context.Context, op string, items []consumer.Owned, sql string,
	args func(ks [][]byte, owners []string, fences []int64) []any) []error {
	out := make([]error, len(items))
	if st == nil {
		for i := range out {
			out[i] = errNil
		}
		return out
	}
	hashes := st.hashes(keysOf(items, func(it consumer.Owned) consumer.Key { return it.Key }))
	for _, round := range rounds(hashes) {
		n := len(round)
		ks, owners, fences := make([][]byte, n), make([]string, n), make([]int64, n)
		for j, i := range round {
			ks[j], owners[j], fences[j] = hashes[i], items[i].Owner, items[i].Fence
		}
		err := st.query(ctx, op, sql, func(rows pgx.Rows) error {
			var idx int64
			var ok, already bool
			var err error
			if op == "release" {
				err = rows.Scan(&idx, &ok, &already)
			} else {
				err = rows.Scan(&idx, &ok)
			}
			if err != nil {
				return err
			}
			if i := round[idx-1]; !ok && !already {
				out[i] = &consumer.LeaseLostError{Key: items[i].Key, Fence: items[i].Fence, Reason: op + ": the claim belongs to another owner or has ended"}
			}
			return nil
		}, args(ks, owners, fences)...)
		if err != nil {
			for _, i := range round {
				out[i] = err
			}
		}
	}
	return out
}

func (st *Store) hashes(keys []consumer.Key) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = st.hash(k)
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
	var (
		now                                         int64
		state, owner, dropped                       *string
		fence, lease, createdMs, updatedMs, expires *int64
		attempts                                    *int32
		fp, result                                  []byte
		errs                                        []string
		errAt                                       []int64
		permanent, locked                           *bool
	)
	if err := st.db.QueryRow(ctx, peekSQL, st.hash(key)).Scan(&now, &state, &owner, &fence, &attempts, &fp, &lease, &result,
		&dropped, &errs, &errAt, &permanent, &locked, &createdMs, &updatedMs, &expires); err != nil {
		return consumer.Record{}, st.fail("peek", err)
	}
	rec := consumer.Record{Key: key, Now: time.UnixMilli(now)}
	if state == nil || *expires <= now {
		return rec, nil
	}
	rec.Found, rec.State, rec.Owner, rec.Fence, rec.Attempts = true, *state, *owner, *fence, int(*attempts)
	copy(rec.Fingerprint[:], fp)
	rec.Dropped = *dropped
	if *state == "completed" && *dropped == "" {
		rec.Result = result
	}
	for j, m := range errs {
		e := consumer.AttemptError{Message: m}
		if j < len(errAt) {
			e.Time = time.Unix(errAt[j], 0)
		}
		rec.History = append(rec.History, e)
	}
	if len(errs) > 0 {
		rec.Error = errs[0]
	}
	rec.Permanent, rec.Locked = *state == "failed" && *permanent, *locked
	rec.Created, rec.Updated = created(*createdMs), created(*updatedMs)
	rec.TTL = time.Duration(*expires-now) * time.Millisecond
	if *state == "started" {
		rec.LeaseUntil = time.UnixMilli(*lease)
		rec.Retention = st.s.Retention
	}
	return rec, nil
}
