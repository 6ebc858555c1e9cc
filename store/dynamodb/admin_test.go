package dynamodb

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/admin/admintest"
	"github.com/idemkit/idemkit/consumer"
)

// adminTable is the table of the operator suite: a scan reads a whole table,
// so its tests do not read the records of every other test.
const adminTable = "idemkit_admin_test"

var (
	adminTableOnce sync.Once
	adminTableErr  error
)

// adminClient returns a client of the test server with adminTable made.
func adminClient(t testing.TB) *ddb.Client {
	t.Helper()
	c := client(t)
	adminTableOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		adminTableErr = CreateTable(ctx, c, TableSpec{Name: adminTable})
		if errors.Is(adminTableErr, ErrNoTTL) {
			adminTableErr = nil
		}
	})
	if adminTableErr != nil {
		t.Fatalf("operator test table: %v", adminTableErr)
	}
	return c
}

// TestOperator runs the operator SPI's conformance suite.
func TestOperator(t *testing.T) {
	cfg := Config{Table: adminTable, ClockSkew: NoClockSkew}
	admintest.Run(t, admintest.Fixtures{
		New: func(t *testing.T, opts ...consumer.Option) (admintest.Store, error) {
			return New(adminClient(t), cfg, append([]consumer.Option{consumer.WithPrefix(prefix(t))}, opts...)...)
		},
		Sibling: func(t *testing.T, s admintest.Store, opts ...consumer.Option) (admintest.Store, error) {
			return New(adminClient(t), cfg, append([]consumer.Option{consumer.WithPrefix(s.Settings().Prefix)}, opts...)...)
		},
		Plant: func(t *testing.T, s admintest.Store) []consumer.Key {
			st := s.(*Store)
			for _, item := range []map[string]types.AttributeValue{
				{attrPK: strAV(st.RecordKey("junk")), "st": numAV(5), "fence": numAV(1), "attempts": numAV(0), attrExpires: numAV(1 << 40)},
				{attrPK: strAV(st.RecordKey("stateless")), "x": strAV("not a record")},
				{attrPK: strAV(st.Settings().Prefix + ":other"), "st": strAV("completed")}, // under the prefix, not a record key
			} {
				if _, err := st.c.PutItem(context.Background(), &ddb.PutItemInput{TableName: aws.String(adminTable), Item: item}); err != nil {
					t.Fatal(err)
				}
			}
			return []consumer.Key{"junk", "stateless"}
		},
	})
}
