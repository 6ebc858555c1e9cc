package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/jackc/pgx/v5"
)

// maxRaces bounds how often one claim is sent again after a concurrent claim
// inserted its key first (each time, the next statement finds the row and decides
// from it, so a second round is all it takes in practice).
const maxRaces = 8

// Begin claims records. Per round of distinct keys, the keys with no row are
// claimed by one plain insert (insertSQL), and the others, when there are any,
// by one statement that decides from their rows (claimSQL).
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
			if !st.partitioned { // the partitioned table has no unique key_hash for a plain insert to meet
				rest, err := st.insert(ctx, claims, hashes, round, out)
				if err != nil {
					for _, i := range round {
						out[i] = consumer.ClaimReply{Err: err}
					}
					continue
				}
				if round = rest; len(round) == 0 {
					continue
				}
			}
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
var errRace = errors.New("the claim met concurrent claims of the same new key too often")

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

// insert runs insertSQL for the items round (distinct keys), fills the replies of
// those it inserted, and returns the others.
func (st *Store) insert(ctx context.Context, claims []consumer.Claim, hashes [][]byte, round []int, out []consumer.ClaimReply) ([]int, error) {
	s := st.s
	n := len(round)
	ks, owners, fps, locked, starts := make([][]byte, n), make([]string, n), make([][]byte, n), make([]bool, n), make([]bool, n)
	keys := make([][]byte, n)
	at := make(map[string]int, n)
	for j, i := range round {
		c := claims[i]
		ks[j], owners[j], locked[j], starts[j], keys[j] = hashes[i], c.Owner, c.Locked, c.Start, []byte(c.Key)
		if !c.Fingerprint.IsZero() {
			fps[j] = append([]byte(nil), c.Fingerprint[:]...)
		}
		at[string(hashes[i])] = i
	}
	err := st.query(ctx, "begin", st.sql.insert, func(rows pgx.Rows) error {
		var h []byte
		var createdMs int64
		if err := rows.Scan(&h, &createdMs); err != nil {
			return err
		}
		i := at[string(h)]
		delete(at, string(h))
		out[i] = consumer.ClaimReply{Status: consumer.StatusAcquired, Fence: 1, Attempts: 1, Lease: s.Lease,
			Created: created(createdMs), Fingerprint: claims[i].Fingerprint}
		return nil
	}, ks, owners, fps, locked, s.Lease.Milliseconds(), s.Retention.Milliseconds(), s.Scope, starts, keys)
	if err != nil {
		return round, err
	}
	rest := round[:0:0]
	for _, i := range round {
		if _, left := at[string(hashes[i])]; left {
			rest = append(rest, i)
		}
	}
	return rest, nil
}

// claim runs claimSQL for the items round (distinct keys), fills their replies,
// and returns the items a concurrent claim beat to the insert.
func (st *Store) claim(ctx context.Context, claims []consumer.Claim, hashes [][]byte, round []int, out []consumer.ClaimReply) ([]int, error) {
	s := st.s
	n := len(round)
	ks, owners, fps, locked, starts := make([][]byte, n), make([]string, n), make([][]byte, n), make([]bool, n), make([]bool, n)
	keys := make([][]byte, n)
	for j, i := range round {
		c := claims[i]
		ks[j], owners[j], locked[j], starts[j], keys[j] = hashes[i], c.Owner, c.Locked, c.Start, []byte(c.Key)
		if !c.Fingerprint.IsZero() {
			fps[j] = append([]byte(nil), c.Fingerprint[:]...)
		}
	}
	var lost []int
	err := st.run(ctx, "begin", st.sql.claim, st.partitioned, func(rows pgx.Rows) error {
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
		case "fresh", "afresh", "claim":
			rep.Status, rep.Lease = consumer.StatusAcquired, s.Lease
		case "takeover":
			rep.Status, rep.Lease = consumer.StatusTakenOver, s.Lease
		case "own":
			rep.Status, rep.Lease = consumer.StatusAcquired, time.Duration(max(lease-now, 0))*time.Millisecond
		case "busy":
			rep.Status, rep.Lease = consumer.StatusInProgress, time.Duration(lease-now)*time.Millisecond
		case "conflict":
			rep.Status = consumer.StatusConflict
		case "completed", "recover": // recover: the effect committed with its completion (InTx)
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
	}, ks, owners, fps, locked, s.Lease.Milliseconds(), s.Retention.Milliseconds(), s.MaxAttempts, s.Scope, starts, keys)
	return lost, err
}

// Settle completes or fails claimed records: one statement per round (settleSQL,
// or completeSQL when every item completes), and a lookup of the items it did not
// change (stateSQL).
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
		ks, owners := make([][]byte, n), make([]string, n)
		complete, results, dropped, msgs, perms := make([]bool, n), make([][]byte, n), make([]string, n), make([]string, n), make([]bool, n)
		for j, i := range round {
			it := items[i]
			ks[j], owners[j], complete[j] = hashes[i], it.Owner, it.Complete
			results[j], dropped[j], perms[j] = it.Result, it.Dropped, it.Permanent
			msgs[j] = consumer.CapText(storableText(it.Message), consumer.MaxErrorText)
		}
		sql, args := st.sql.settle, []any{ks, owners, complete, results, dropped, msgs, perms, s.Retention.Milliseconds(), s.MaxAttempts}
		if !slices.Contains(complete, false) {
			sql, args = st.sql.complete, []any{ks, owners, results, dropped, s.Retention.Milliseconds()}
		}
		done := make([]bool, n)
		err := st.query(ctx, "settle", sql, func(rows pgx.Rows) error {
			var idx int64
			var set string
			if err := rows.Scan(&idx, &set); err != nil {
				return err
			}
			done[idx-1] = true
			out[round[idx-1]].Terminal = set == "failed"
			return nil
		}, args...)
		if err == nil {
			// Unchanged: a settlement sent again after a lost reply is answered as
			// the first one was; any other lost its claim.
			err = st.unchanged(ctx, "settle", round, hashes, done, func(i int, state string, fence int64) {
				it := items[i]
				switch {
				case fence == it.Fence && (it.Complete && state == "completed" || !it.Complete && state == "retry"):
				case fence == it.Fence && !it.Complete && state == "failed":
					out[i].Terminal = true
				default:
					out[i].Err = &consumer.LeaseLostError{Key: it.Key, Fence: it.Fence, Reason: "settle: the claim belongs to another owner or has ended"}
				}
			})
		}
		if err != nil {
			for _, i := range round {
				out[i] = consumer.SettleReply{Err: err}
			}
		}
	}
	return out
}

// storableText is s as a text column takes it: PostgreSQL refuses NUL and invalid
// UTF-8, and an error text it refused would fail the whole settlement, the other
// items' with it, at every attempt.
func storableText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// unchanged looks up the live rows of the items of round that a statement did
// not change (done false) and hands each to decide, with state "" when there is
// none.
func (st *Store) unchanged(ctx context.Context, op string, round []int, hashes [][]byte, done []bool, decide func(i int, state string, fence int64)) error {
	var ks [][]byte
	for j, i := range round {
		if !done[j] {
			ks = append(ks, hashes[i])
		}
	}
	if len(ks) == 0 {
		return nil
	}
	type found struct {
		state string
		fence int64
	}
	rows := make(map[string]found, len(ks))
	err := st.query(ctx, op, st.sql.state, func(r pgx.Rows) error {
		var h []byte
		var f found
		if err := r.Scan(&h, &f.state, &f.fence); err != nil {
			return err
		}
		rows[string(h)] = f
		return nil
	}, ks)
	if err != nil {
		return err
	}
	for j, i := range round {
		if !done[j] {
			f := rows[string(hashes[i])]
			decide(i, f.state, f.fence)
		}
	}
	return nil
}

// Extend renews the leases of running attempts (extendSQL).
func (st *Store) Extend(ctx context.Context, items []consumer.Owned) []error {
	return st.owned(ctx, "extend", items, st.sql.extend, st.s.Lease.Milliseconds(), st.s.Retention.Milliseconds())
}

// Release gives claims back without a result; the abandoned attempt is not
// counted (releaseSQL).
func (st *Store) Release(ctx context.Context, items []consumer.Owned) []error {
	return st.owned(ctx, "release", items, st.sql.release, st.s.Retention.Milliseconds())
}

// owned runs an owner compare-and-set statement (sql, over a round's keys and
// owners, then args) per round. An item it did not change lost its claim, unless
// it is a release sent again after a lost reply (a retry row with the claim's
// fence).
func (st *Store) owned(ctx context.Context, op string, items []consumer.Owned, sql string, args ...any) []error {
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
		ks, owners := make([][]byte, n), make([]string, n)
		for j, i := range round {
			ks[j], owners[j] = hashes[i], items[i].Owner
		}
		done := make([]bool, n)
		err := st.query(ctx, op, sql, func(rows pgx.Rows) error {
			var idx int64
			if err := rows.Scan(&idx); err != nil {
				return err
			}
			done[idx-1] = true
			return nil
		}, append([]any{ks, owners}, args...)...)
		if err == nil {
			err = st.unchanged(ctx, op, round, hashes, done, func(i int, state string, fence int64) {
				if op == "release" && state == "retry" && fence == items[i].Fence {
					return
				}
				out[i] = &consumer.LeaseLostError{Key: items[i].Key, Fence: items[i].Fence, Reason: op + ": the claim belongs to another owner or has ended"}
			})
		}
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
		permanent, locked, counted                  *bool
	)
	if err := st.db.QueryRow(ctx, st.sql.peek, st.hash(key)).Scan(&now, &state, &owner, &fence, &attempts, &fp, &lease, &result,
		&dropped, &errs, &errAt, &permanent, &locked, &counted, &createdMs, &updatedMs, &expires); err != nil {
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
	rec.Permanent, rec.Locked, rec.Counted = *state == "failed" && *permanent, *locked, *state == "started" && *counted
	rec.Created, rec.Updated = created(*createdMs), created(*updatedMs)
	rec.TTL = time.Duration(*expires-now) * time.Millisecond
	if *state == "started" {
		rec.LeaseUntil = time.UnixMilli(*lease)
		rec.Retention = st.s.Retention
	}
	return rec, nil
}
