package dynamodb

import (
	"context"
	"errors"
	"fmt"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// ErrNoTable: the store's table does not exist (or is not ACTIVE yet). The
// error names the table and says to make it with CreateTable. It comes
// wrapped in a *consumer.StoreError (consumer.ErrStoreUnavailable): nothing was
// claimed or run, no attempt is counted, and adapters retry the message as
// for any outage, until the table is there.
var ErrNoTable = errors.New("dynamodb: no such table")

// Check verifies that the store can do its job, for start-up and readiness
// probes: the table exists, is ACTIVE, and takes the record key. It reads one
// item no record uses (dynamodb:GetItem, which the store needs anyway), bounded
// by consumer.WithCallTimeout. A missing table answers an error matching
// consumer.ErrStoreUnavailable and ErrNoTable that names the table and
// CreateTable; a table that refuses the record key (another key schema)
// consumer.ErrInvalidConfig; anything else (unreachable, throttled, access
// denied) consumer.ErrStoreUnavailable with DynamoDB's error.
func (st *Store) Check(ctx context.Context) error {
	if st == nil {
		return errNilStore
	}
	ctx, cancel := st.bound(ctx)
	defer cancel()
	_, err := st.c.GetItem(ctx, &ddb.GetItemInput{TableName: st.table, Key: keyOf(st.RecordKey(""))})
	var api smithy.APIError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &api) && api.ErrorCode() == "ValidationException":
		return configError("table %q refused a read by the record key (%v): a records table has the partition key %q (a string) "+
			"and no sort key; dynamodb.CreateTable makes one, and says what differs in an existing table", st.cfg.Table, err, attrPK)
	}
	return st.storeErr("check", err)
}

// explain adds to err, from a call on the table, what to do when the table is
// missing.
func (st *Store) explain(err error) error {
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) {
		return err
	}
	return fmt.Errorf("%w: table %q does not exist or is not ACTIVE yet: make it with dynamodb.CreateTable(ctx, client, "+
		"dynamodb.TableSpec{Name: %q}) at start-up or in the deployment, or give Config.Table the records table's name: %w",
		ErrNoTable, st.cfg.Table, st.cfg.Table, err)
}
