package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/typednil"
	"github.com/jackc/pgx/v5"
)

// partitionedTable is the time-partitioned record table (migration 005).
const partitionedTable = "idemkit_records_by_time"

// NewPartitionedStore is NewStore on the time-partitioned record table,
// idemkit_records_by_time, for high volume: its rows are partitioned by the time
// of their last write, so that expiry is dropping whole partitions
// (MaintainPartitions) instead of deleting rows and vacuuming after them. Run
// MaintainPartitions before the first call and then at least once a window. The
// semantics are NewStore's (the same conformance suite and differential test).
// What it costs: a claim takes its keys' advisory locks in the same round trip
// (the table has no unique index on the key alone to keep one record per key),
// every lookup by key probes each partition's index, and a write in a later
// window than the row's moves the row to that window's partition; a claim that
// meets a row moved by a concurrent write fails with a retryable error.
func NewPartitionedStore(db DB, opts ...consumer.Option) (*Store, error) {
	st, err := NewStore(db, opts...)
	if err != nil {
		return nil, err
	}
	st.sql, st.table, st.partitioned = statementsOn(partitionedTable), partitionedTable, true
	return st, nil
}

// Partitioning is how MaintainPartitions lays out idemkit_records_by_time.
type Partitioning struct {
	// Window is the span of write times each partition holds. Default 24h; at least
	// one second.
	Window time.Duration
	// Ahead is how far past the database server's now the partitions are made.
	// Default three windows; at least one window.
	Ahead time.Duration
	// Keep is how long after its window ends a partition is kept. Required: at
	// least the longest lease + retention of the stores on the table, since a
	// record expires at most that long after its last write.
	Keep time.Duration
}

// partitionLock serialises MaintainPartitions runs ("idemkit" + 0x02).
const partitionLock int64 = 0x6964656d6b697402

// MaintainPartitions makes the partitions of idemkit_records_by_time for the
// windows from now to now + Ahead that are missing, and drops the partitions it
// made whose window ended more than Keep ago (every record in them has expired).
// It returns the names of the partitions made and dropped. Partitions are named
// idemkit_records_by_time_<start>_<end> (milliseconds of the server's clock);
// others attached by hand are left alone. Runs from several processes at once are
// serialised by an advisory lock; creating and dropping a partition locks the
// table briefly, and a run that cannot have that lock within 5 seconds fails (run
// it again later) rather than hold up the stores' statements queued behind it. Run it at start-up and at least once a window (hourly for daily
// windows). A write for which no partition exists fails with an error naming this
// function.
func MaintainPartitions(ctx context.Context, db Beginner, p Partitioning) (made, dropped []string, err error) {
	if db == nil || typednil.Is(db) {
		return nil, nil, errors.New("postgres: MaintainPartitions: nil database")
	}
	if p.Window == 0 {
		p.Window = 24 * time.Hour
	}
	if p.Ahead == 0 {
		p.Ahead = 3 * p.Window
	}
	switch {
	case p.Window < time.Second:
		return nil, nil, fmt.Errorf("postgres: MaintainPartitions: Window %v: give at least one second", p.Window)
	case p.Ahead < p.Window:
		return nil, nil, fmt.Errorf("postgres: MaintainPartitions: Ahead %v is less than the window %v: give at least one window", p.Ahead, p.Window)
	case p.Keep <= 0:
		return nil, nil, fmt.Errorf("postgres: MaintainPartitions: Keep %v: give at least the stores' lease + retention", p.Keep)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: MaintainPartitions: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// Creating or dropping a partition waits for the table's lock behind every
	// statement on it, and every later statement waits behind that: give up after
	// a few seconds (and be run again) rather than stall the stores.
	var now int64
	if err := tx.QueryRow(ctx, `SELECT pg_advisory_xact_lock($1), (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
		set_config('lock_timeout', '5s', true)`, partitionLock).Scan(nil, &now, nil); err != nil {
		return nil, nil, fmt.Errorf("postgres: MaintainPartitions: %w", missingSchema(err, partitionedTable))
	}
	parts, err := partitions(ctx, tx)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: MaintainPartitions: %w", missingSchema(err, partitionedTable))
	}
	window, ahead, keep := p.Window.Milliseconds(), p.Ahead.Milliseconds(), p.Keep.Milliseconds()
	next := now - now%window
	for _, pt := range parts {
		if pt.end+keep <= now {
			if _, err := tx.Exec(ctx, `DROP TABLE `+pgx.Identifier{pt.name}.Sanitize()); err != nil {
				return nil, nil, fmt.Errorf("postgres: MaintainPartitions: drop %s: %w", pt.name, err)
			}
			dropped = append(dropped, pt.name)
		}
		next = max(next, pt.end)
	}
	for next < now+ahead {
		end := (next/window + 1) * window
		name := fmt.Sprintf("%s_%d_%d", partitionedTable, next, end)
		if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM (%d) TO (%d)`,
			pgx.Identifier{name}.Sanitize(), partitionedTable, next, end)); err != nil {
			return nil, nil, fmt.Errorf("postgres: MaintainPartitions: create %s: %w", name, err)
		}
		made = append(made, name)
		next = end
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, fmt.Errorf("postgres: MaintainPartitions: commit: %w", err)
	}
	return made, dropped, nil
}

type partition struct {
	name       string
	start, end int64
}

// partitions lists the partitions MaintainPartitions made, oldest first.
func partitions(ctx context.Context, tx pgx.Tx) ([]partition, error) {
	rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass`, partitionedTable)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var out []partition
	for _, n := range names {
		f := strings.Split(strings.TrimPrefix(n, partitionedTable+"_"), "_")
		if len(f) != 2 || !strings.HasPrefix(n, partitionedTable+"_") {
			continue
		}
		start, err1 := strconv.ParseInt(f[0], 10, 64)
		end, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 == nil && err2 == nil && start < end {
			out = append(out, partition{name: n, start: start, end: end})
		}
	}
	slices.SortFunc(out, func(a, b partition) int { return int(a.start - b.start) })
	return out, nil
}
