package dynamodb

import (
	"testing"

	"github.com/idemkit/idemkit/admin/admintest"
	"github.com/idemkit/idemkit/admin/ui/uitest"
	"github.com/idemkit/idemkit/consumer"
)

// TestUI runs the operator web UI's handler tests on this store.
func TestUI(t *testing.T) {
	cfg := Config{Table: adminTable, ClockSkew: NoClockSkew}
	uitest.Run(t, admintest.Fixtures{
		New: func(t *testing.T, opts ...consumer.Option) (admintest.Store, error) {
			return New(adminClient(t), cfg, append([]consumer.Option{consumer.WithPrefix(prefix(t))}, opts...)...)
		},
	})
}
