package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/typednil"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotMigrated: a table or column the package uses is not in the database:
// Migrate (or your own tool with the files of Migrations) has not been run on it,
// or not since this version of idemkit. Every call that meets it is a store
// outage, not a failed attempt: a claim, a settlement, or an InTx/InSQLTx whose
// completion cannot be written gives its claim back without counting an attempt
// (the error also matches consumer.ErrStoreUnavailable and consumer.ErrAbandoned),
// so the adapters retry the message and dead-letter nothing until the schema is
// there. Check and Store.Check find it at start-up.
var ErrNotMigrated = errors.New("postgres: schema not migrated")

// PostgreSQL's codes for a missing table (relation) and a missing column.
const (
	undefinedTable  = "42P01"
	undefinedColumn = "42703"
)

// Names of the package's tables.
const (
	completionsTable = "idemkit_completions"
	recordsTable     = "idemkit_records"
)

// columns are the columns of each table that the package's statements use: the
// start-up checks read them all, so that a column added by a later migration is
// missed at start, not by the first settlement.
var columns = map[string][]string{
	completionsTable: {"key_hash", "scope", "fence", "result", "completed_at", "expires_at"},
	recordsTable: {"key_hash", "scope", "state", "owner", "fence", "attempts", "fp", "lease_ms", "result", "dropped",
		"permanent", "locked", "created_ms", "updated_ms", "expires_ms", "errs", "err_at", "written_ms", "counted", "key", "notes",
		"note_at"},
	partitionedTable: {"key_hash", "scope", "state", "owner", "fence", "attempts", "fp", "lease_ms", "result", "dropped",
		"permanent", "locked", "created_ms", "updated_ms", "expires_ms", "errs", "err_at", "written_ms", "counted", "key", "notes",
		"note_at"},
}

// probe is a statement that reads every column of table and no row: it fails
// with undefined_table or undefined_column when the schema is behind.
func probe(table string) string {
	return `SELECT ` + strings.Join(columns[table], ", ") + ` FROM ` + table + ` WHERE false`
}

// missingSchema turns a missing table or column (of table, the one the failed
// statement used) into an error matching ErrNotMigrated and err that names it
// and says to run Migrate; other errors pass through.
func missingSchema(err error, table string) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || (pe.Code != undefinedTable && pe.Code != undefinedColumn) {
		return err
	}
	return fmt.Errorf("%w: %s (table %s in the connection's search_path): run postgres.Migrate(ctx, pool) at start-up, or apply the files of postgres.Migrations() with your own migration tool: %w",
		ErrNotMigrated, pe.Message, table, err)
}

// notMigratedOutage is the error InTx and InSQLTx return when the completion table
// is not there: a store outage that gives the claim back without counting an
// attempt (the handler's effect was rolled back with the transaction). Other
// errors come back nil.
func notMigratedOutage(err error) error {
	m := missingSchema(err, completionsTable)
	if m == err {
		return nil
	}
	return consumer.Abandon(&consumer.StoreError{Op: "transactional completion", Err: m})
}

// Check verifies that db has the table InTx writes (idemkit_completions, with every
// column this version uses), for start-up and readiness probes of services that
// call InTx: it returns an error matching ErrNotMigrated that says to run Migrate
// when the table or a column is missing, and a *consumer.StoreError when the
// database cannot be reached. It reads no row.
func Check(ctx context.Context, db Beginner) error {
	if db == nil || typednil.Is(db) {
		return errors.New("postgres: Check: nil database")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return &consumer.StoreError{Op: "check", Err: err}
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, probe(completionsTable)); err != nil {
		return checkError(err, completionsTable)
	}
	return nil
}

// CheckSQL is Check for InSQLTx users: db is a database/sql handle on PostgreSQL.
func CheckSQL(ctx context.Context, db *sql.DB) error {
	if db == nil {
		return errors.New("postgres: CheckSQL: nil database")
	}
	rows, err := db.QueryContext(ctx, probe(completionsTable))
	if err != nil {
		return checkError(err, completionsTable)
	}
	return rows.Close()
}

// Check verifies that the store's table is there with every column this version
// uses, for start-up and readiness probes. It returns an error matching
// ErrNotMigrated that says to run Migrate when it is not, and a
// *consumer.StoreError (matching consumer.ErrStoreUnavailable) when the database
// cannot be reached. The store makes the same check before its first call.
func (st *Store) Check(ctx context.Context) error {
	if st == nil {
		return errNil
	}
	if err := st.probe(ctx); err != nil {
		return checkError(err, st.table)
	}
	return nil
}

// probe reads the store's table as Check does, bounded by the call timeout, and
// remembers a success.
func (st *Store) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, st.s.CallTimeout)
	defer cancel()
	if _, err := st.db.Exec(ctx, probe(st.table)); err != nil {
		return err
	}
	st.checked.Store(true)
	return nil
}

// checkError is a failed check's error: the missing schema, or the outage.
func checkError(err error, table string) error {
	if m := missingSchema(err, table); m != err {
		return m
	}
	return &consumer.StoreError{Op: "check", Err: err}
}
