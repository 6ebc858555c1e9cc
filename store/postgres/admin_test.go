package postgres

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/admin/admintest"
	"github.com/idemkit/idemkit/consumer"
)

// adminFixtures runs the operator suite on stores made by mk on a fresh schema
// each; a sibling shares its schema. PostgreSQL rows are typed, so no value at a
// record key can be something other than a record: the corrupt-values section is
// skipped.
func adminFixtures(pool func(t *testing.T) DB, mk func(DB, ...consumer.Option) (*Store, error)) admintest.Fixtures {
	return admintest.Fixtures{
		New: func(t *testing.T, opts ...consumer.Option) (admintest.Store, error) {
			return mk(pool(t), opts...)
		},
		Sibling: func(t *testing.T, s admintest.Store, opts ...consumer.Option) (admintest.Store, error) {
			return mk(s.(*Store).db, opts...)
		},
	}
}

func TestOperatorConformance(t *testing.T) {
	admintest.Run(t, adminFixtures(func(t *testing.T) DB { return migrated(t) }, NewStore))
}

func TestPartitionedOperatorConformance(t *testing.T) {
	admintest.Run(t, adminFixtures(func(t *testing.T) DB { return partitioned(t, time.Minute, 10*time.Minute) }, NewPartitionedStore))
}
