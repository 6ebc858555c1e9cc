package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/typednil"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the Store needs from pgx v5: *pgxpool.Pool has it. Give the Store a
// pool (or a connection), not a transaction: every call is its own statement and
// commits at once, so that other workers see the claim.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Store keeps idempotency records in PostgreSQL: a consumer.Store with the
// semantics of the Redis store (it passes the same conformance suite). Leases and
// retention run on the database server's clock. Every call (a batch of claims,
// settlements, renewals or releases) is one SQL statement over arrays of keys
// (statements.go; a batch of claims in which some keys have rows: two), bounded
// by the store's call timeout.
type Store struct {
	db DB
	s  consumer.Settings
	// sql holds the statements on the store's table; partitioned says it is the
	// time-partitioned one (NewPartitionedStore).
	sql         statements
	table       string
	partitioned bool
	// checked: the table was found with every column (Check), before the first
	// call or by the user.
	checked atomic.Bool
}

var _ consumer.Store = (*Store)(nil)

// NewStore returns a store on db (Migrate must have created its table: the store
// checks it before its first call, and Check does it for a readiness probe; until
// it is there every call fails as a store outage matching ErrNotMigrated, and no
// attempt is counted). It takes
// consumer options (WithScope, WithLease, WithRetention, WithMaxAttempts, ...); the
// prefix option is accepted and unused.
func NewStore(db DB, opts ...consumer.Option) (*Store, error) {
	if db == nil || typednil.Is(db) {
		return nil, errors.New("postgres: NewStore: nil database")
	}
	s, err := consumer.NewSettings(opts...)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, s: s, sql: statementsOn(recordsTable), table: recordsTable}, nil
}

// Settings returns the store's resolved options.
func (st *Store) Settings() consumer.Settings {
	if st == nil {
		return consumer.Settings{}
	}
	return st.s
}

func (st *Store) hash(k consumer.Key) []byte { return keyHash(st.s.Scope, k) }

// rounds splits items into statements whose keys are distinct, keeping order: an
// item whose key came earlier in the batch goes to the statement after that one's,
// so that it sees the earlier item's effect, as a batch run in order would. Almost
// every batch is one round. Each round is in key order: the statements lock rows in
// the order of their arrays, and one order for every batch keeps them from
// deadlocking.
func rounds(hashes [][]byte) [][]int {
	seen := make(map[string]int, len(hashes))
	var out [][]int
	for i, h := range hashes {
		r := seen[string(h)]
		seen[string(h)] = r + 1
		if r == len(out) {
			out = append(out, make([]int, 0, len(hashes)))
		}
		out[r] = append(out[r], i)
	}
	for _, r := range out {
		slices.SortFunc(r, func(a, b int) int { return bytes.Compare(hashes[a], hashes[b]) })
	}
	return out
}

// query runs one statement bounded by the call timeout and hands each row to scan.
func (st *Store) query(ctx context.Context, op, sql string, scan func(pgx.Rows) error, args ...any) error {
	return st.run(ctx, op, sql, false, scan, args...)
}

// run is query; lock (the claims of the time-partitioned table, where no unique
// index keeps one record per key) runs sql behind the advisory locks of its keys
// (the first argument), taken in a fixed order, so that two claims of a new key
// cannot both see it absent. On the plain table the statement is planned at each
// execution (pgx's cache-describe mode: an unnamed statement, one round trip): a
// plan cached while the table was small (a sequential scan) would otherwise
// outlive its growth until the next ANALYZE. The plain claim of new keys
// (insertSQL), whose plan has nothing to choose (rows from arrays, conflicts found
// by the primary key), runs in the pool's own mode instead: by default a statement
// prepared once per connection, which spares the server parsing and planning it
// at every batch (set the pool's DefaultQueryExecMode for a pooler that cannot
// keep prepared statements). The partitioned table's statements go through queryTx.
func (st *Store) run(ctx context.Context, op, sql string, lock bool, scan func(pgx.Rows) error, args ...any) error {
	if !st.checked.Load() {
		if err := st.probe(ctx); err != nil {
			return st.fail(op, err)
		}
	}
	if st.partitioned {
		return st.queryTx(ctx, txCall{op: op, sql: sql, plans: []string{partitionedPlans}, lock: lock, scan: scan, args: args})
	}
	ctx, cancel := context.WithTimeout(ctx, st.s.CallTimeout)
	defer cancel()
	if sql != st.sql.insert {
		args = append([]any{pgx.QueryExecModeCacheDescribe}, args...)
	}
	rows, err := st.db.Query(ctx, sql, args...)
	if err != nil {
		return st.fail(op, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return st.fail(op, err)
		}
	}
	if err := rows.Err(); err != nil {
		return st.fail(op, err)
	}
	return nil
}

// partitionedPlans are the planner settings of the statements on the
// time-partitioned table: planned at each execution, and by index. Each lookup by
// key is a probe of every partition's index there, which the planner prices above
// a hash join over whole partitions; the scan it then picks grows with the table.
// Without JIT compilation: the prices of those plans pass its threshold, and
// compiling costs tens of milliseconds where the statement takes one.
const partitionedPlans = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true), set_config('jit', 'off', true),
	set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
	set_config('enable_mergejoin', 'off', true)`

// txCall is one statement queryTx runs: sql with args, each row handed to scan,
// after the planner settings plans (statements of set_config calls), behind the
// advisory locks of its keys (args[0]) when lock is set.
type txCall struct {
	op, sql string
	plans   []string
	lock    bool
	scan    func(pgx.Rows) error
	args    []any
}

// queryTx runs a call as query does, in a READ COMMITTED transaction with its
// planner settings, behind its keys' advisory locks when it asks for them: BEGIN,
// the settings, the locks, the statement and COMMIT go to the server together, in
// one round trip.
func (st *Store) queryTx(ctx context.Context, c txCall) error {
	op, sql, scan, args := c.op, c.sql, c.scan, c.args
	ctx, cancel := context.WithTimeout(ctx, st.s.CallTimeout)
	defer cancel()
	b := &pgx.Batch{}
	// READ COMMITTED whatever the server's default: each statement's snapshot is
	// then taken after the locks before it are granted.
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	for _, p := range c.plans {
		b.Queue(p)
	}
	if c.lock {
		hashes := args[0].([][]byte)
		locks := make([]int64, len(hashes))
		for i, h := range hashes {
			locks[i] = int64(binary.BigEndian.Uint64(h[:8]))
		}
		b.Queue(`SELECT count(pg_advisory_xact_lock(x)) FROM (SELECT unnest($1::bigint[]) AS x ORDER BY 1) s`, locks)
	}
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	br := st.db.SendBatch(ctx, b)
	err := func() error {
		for range len(b.QueuedQueries) - 2 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := scan(rows); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		_, err = br.Exec()
		return err
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if tx := br.Tx(); tx != nil {
		// After the COMMIT this only hands a pool its connection back; after an
		// error it ends the aborted transaction, so the connection is usable again.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), st.s.CallTimeout)
		_ = tx.Rollback(rctx)
		cancel()
	}
	if err != nil {
		return st.fail(op, err)
	}
	return nil
}

// fail names a failed call: a missing table or column says to run Migrate (and
// the store checks its table again before the next call); a missing partition
// says to run MaintainPartitions; anything else is the store being unavailable.
// Each is a *consumer.StoreError: retried, and never an attempt.
func (st *Store) fail(op string, err error) error {
	var pe *pgconn.PgError
	if m := missingSchema(err, st.table); m != err {
		st.checked.Store(false)
		err = m
	} else if errors.As(err, &pe) && pe.Code == checkViolation && strings.Contains(pe.Message, "no partition") {
		err = fmt.Errorf("postgres: %s: run postgres.MaintainPartitions (at start-up and at least once a window) so that the partitions ahead exist: %w", pe.Message, err)
	}
	return &consumer.StoreError{Op: op, Err: err}
}

// checkViolation is PostgreSQL's code for a row that no partition takes (among
// other check violations).
const checkViolation = "23514"

func created(ms int64) time.Time { return time.UnixMilli(ms).Truncate(time.Second) }

func keysOf[E any](items []E, key func(E) consumer.Key) []consumer.Key {
	out := make([]consumer.Key, len(items))
	for i, it := range items {
		out[i] = key(it)
	}
	return out
}

// errNil: a method called on a nil *Store.
var errNil = errors.New("postgres: nil *Store: use NewStore")
