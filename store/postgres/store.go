package postgres

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the Store needs from pgx v5: *pgxpool.Pool has it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Store keeps idempotency records in PostgreSQL: a consumer.Store with the
// semantics of the Redis store (it passes the same conformance suite). Leases and
// retention run on the database server's clock. A batch of claims or settlements is
// one transaction: the keys' transaction-scoped advisory locks (taken in one
// statement, in a fixed order, so batches never deadlock), one read of their rows,
// one upsert of the rows that changed, and the commit. Every call is bounded by
// the store's call timeout.
type Store struct {
	db DB
	s  consumer.Settings
}

var _ consumer.Store = (*Store)(nil)

// NewStore returns a store on db (Migrate must have created its table). It takes
// consumer options (WithScope, WithLease, WithRetention, WithMaxAttempts, ...); the
// prefix option is accepted and unused.
func NewStore(db DB, opts ...consumer.Option) (*Store, error) {
	if db == nil || isNilPointer(db) {
		return nil, errors.New("postgres: NewStore: nil database")
	}
	s, err := consumer.NewSettings(opts...)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, s: s}, nil
}

// Settings returns the store's resolved options.
func (st *Store) Settings() consumer.Settings {
	if st == nil {
		return consumer.Settings{}
	}
	return st.s
}

// row is one record as the table keeps it.
type row struct {
	state     string
	owner     string
	fence     int64
	attempts  int
	fp        consumer.Fingerprint
	lease     int64
	result    []byte
	dropped   string
	history   []consumer.AttemptError
	permanent bool
	locked    bool
	created   int64
	updated   int64
	expires   int64
}

// historyLen and historyText are the Redis record's: the last errors kept, and
// how much of an older one.
const (
	historyLen  = 4
	historyText = 256
	maxError    = 8 << 10
)

func (r *row) pushError(now int64, msg string) {
	h := make([]consumer.AttemptError, 0, historyLen)
	h = append(h, consumer.AttemptError{Time: time.UnixMilli(now).Truncate(time.Second), Message: consumer.CapText(msg, maxError)})
	for _, e := range r.history {
		if len(h) == historyLen {
			break
		}
		if len(e.Message) > historyText {
			e.Message = e.Message[:historyText]
		}
		h = append(h, e)
	}
	r.history = h
}

func (r *row) lastError() string {
	if len(r.history) == 0 {
		return ""
	}
	return r.history[0].Message
}

func (r *row) claim(c consumer.Claim, now, lease, ret int64) {
	r.state, r.owner, r.locked = "started", c.Owner, c.Locked
	if r.fp.IsZero() {
		r.fp = c.Fingerprint
	}
	r.lease, r.updated, r.expires = now+lease, now, now+lease+ret
	r.fence++
	r.attempts++
}

func (r *row) exhaust(now, ret int64, msg string) {
	if msg != "" {
		r.pushError(now, msg)
	}
	r.state, r.owner, r.locked, r.permanent = "failed", "", false, false
	r.lease, r.updated, r.expires = 0, now, now+ret
}

func created(ms int64) time.Time { return time.UnixMilli(ms).Truncate(time.Second) }

// batch is one transaction over the rows of keys: fn sees the server's clock and
// each key's live row (nil when absent or expired; two items of one key share it)
// and may replace rows with set; every row it can see is written back.
type batch struct {
	now    int64
	hashes [][]byte
	rows   map[string]*row
}

func (b *batch) get(i int) *row              { return b.rows[string(b.hashes[i])] }
func (b *batch) set(i int, r *row)           { b.rows[string(b.hashes[i])] = r }
func (st *Store) hash(k consumer.Key) []byte { return keyHash(st.s.Scope, k) }

func (st *Store) transact(ctx context.Context, op string, keys []consumer.Key, fn func(b *batch)) error {
	return st.run(ctx, op, keys, true, fn)
}

// run is transact; without write, nothing is written back (Peek).
func (st *Store) run(ctx context.Context, op string, keys []consumer.Key, write bool, fn func(b *batch)) error {
	ctx, cancel := context.WithTimeout(ctx, st.s.CallTimeout)
	defer cancel()
	b := &batch{hashes: make([][]byte, len(keys)), rows: map[string]*row{}}
	locks := make([]int64, 0, len(keys))
	for i, k := range keys {
		b.hashes[i] = st.hash(k)
		locks = append(locks, int64(binary.BigEndian.Uint64(b.hashes[i][:8])))
	}
	slices.Sort(locks)
	locks = slices.Compact(locks)
	tx, err := st.db.Begin(ctx)
	if err != nil {
		return st.fail(op, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT count(pg_advisory_xact_lock(x)) FROM (SELECT x FROM unnest($1::bigint[]) x ORDER BY x) s`, locks); err != nil {
		return st.fail(op, err)
	}
	if err := tx.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&b.now); err != nil {
		return st.fail(op, err)
	}
	rows, err := tx.Query(ctx, `SELECT key_hash, state, owner, fence, attempts, fp, lease_ms, result, dropped, history,
		permanent, locked, created_ms, updated_ms, expires_ms FROM idemkit_records WHERE key_hash = ANY($1)`, b.hashes)
	if err != nil {
		return st.fail(op, err)
	}
	for rows.Next() {
		var h, fp []byte
		var hist []byte
		r := &row{}
		if err := rows.Scan(&h, &r.state, &r.owner, &r.fence, &r.attempts, &fp, &r.lease, &r.result, &r.dropped, &hist,
			&r.permanent, &r.locked, &r.created, &r.updated, &r.expires); err != nil {
			rows.Close()
			return st.fail(op, err)
		}
		copy(r.fp[:], fp)
		if err := json.Unmarshal(hist, &r.history); err != nil {
			rows.Close()
			return st.fail(op, fmt.Errorf("history of a record: %w", err))
		}
		if r.expires > b.now {
			b.rows[string(h)] = r
		}
	}
	if err := rows.Err(); err != nil {
		return st.fail(op, err)
	}
	fn(b)
	if write && len(b.rows) > 0 {
		if err := st.upsert(ctx, tx, b.rows); err != nil {
			return st.fail(op, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return st.fail(op, err)
	}
	return nil
}

func (st *Store) upsert(ctx context.Context, tx pgx.Tx, rows map[string]*row) error {
	n := len(rows)
	var (
		hs, fps, results                = make([][]byte, 0, n), make([][]byte, 0, n), make([][]byte, 0, n)
		scopes, states, owners, dropped = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		hists                           = make([]string, 0, n)
		fences, leases, cr, up, ex      = make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		attempts                        = make([]int32, 0, n)
		perms, locks                    = make([]bool, 0, n), make([]bool, 0, n)
	)
	for h, r := range rows {
		hist, err := json.Marshal(r.history)
		if err != nil {
			return err
		}
		var fp []byte
		if !r.fp.IsZero() {
			fp = append([]byte(nil), r.fp[:]...)
		}
		hs, fps, results = append(hs, []byte(h)), append(fps, fp), append(results, r.result)
		scopes, states, owners, dropped = append(scopes, st.s.Scope), append(states, r.state), append(owners, r.owner), append(dropped, r.dropped)
		hists = append(hists, string(hist))
		fences, leases, cr, up, ex = append(fences, r.fence), append(leases, r.lease), append(cr, r.created), append(up, r.updated), append(ex, r.expires)
		attempts, perms, locks = append(attempts, int32(r.attempts)), append(perms, r.permanent), append(locks, r.locked)
	}
	_, err := tx.Exec(ctx, `INSERT INTO idemkit_records (key_hash, scope, state, owner, fence, attempts, fp, lease_ms, result,
		dropped, history, permanent, locked, created_ms, updated_ms, expires_ms)
	SELECT k, sc, st, ow, f, a, fp, l, r, d, h::jsonb, p, lk, c, u, e
	FROM unnest($1::bytea[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::int[], $7::bytea[], $8::bigint[],
		$9::bytea[], $10::text[], $11::text[], $12::bool[], $13::bool[], $14::bigint[], $15::bigint[], $16::bigint[])
		AS t(k, sc, st, ow, f, a, fp, l, r, d, h, p, lk, c, u, e)
	ON CONFLICT (key_hash) DO UPDATE SET scope = EXCLUDED.scope, state = EXCLUDED.state, owner = EXCLUDED.owner,
		fence = EXCLUDED.fence, attempts = EXCLUDED.attempts, fp = EXCLUDED.fp, lease_ms = EXCLUDED.lease_ms,
		result = EXCLUDED.result, dropped = EXCLUDED.dropped, history = EXCLUDED.history, permanent = EXCLUDED.permanent,
		locked = EXCLUDED.locked, created_ms = EXCLUDED.created_ms, updated_ms = EXCLUDED.updated_ms,
		expires_ms = EXCLUDED.expires_ms`,
		hs, scopes, states, owners, fences, attempts, fps, leases, results, dropped, hists, perms, locks, cr, up, ex)
	return err
}

// fail names a failed call: a missing table says to run Migrate; anything else is
// the store being unavailable (retryable).
func (st *Store) fail(op string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == undefinedTable {
		return &consumer.StoreError{Op: op, Err: missingSchema(err)}
	}
	return &consumer.StoreError{Op: op, Err: err}
}

func keysOf[E any](items []E, key func(E) consumer.Key) []consumer.Key {
	out := make([]consumer.Key, len(items))
	for i, it := range items {
		out[i] = key(it)
	}
	return out
}

// errNil: a method called on a nil *Store.
var errNil = errors.New("postgres: nil *Store: use NewStore")
