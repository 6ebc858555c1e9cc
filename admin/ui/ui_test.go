package ui_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/admin/admintest"
	"github.com/idemkit/idemkit/admin/ui/uitest"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
	"github.com/idemkit/idemkit/store/postgres"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { testenv.Run(m) }

func TestUIMemory(t *testing.T) {
	uitest.Run(t, admintest.Fixtures{
		New: func(t *testing.T, opts ...consumer.Option) (admintest.Store, error) {
			return memory.NewStore(opts...)
		},
	})
}

func TestUIRedis(t *testing.T) {
	c := testenv.Redis(t)
	uitest.Run(t, admintest.Fixtures{
		New: func(t *testing.T, opts ...consumer.Option) (admintest.Store, error) {
			return redisstore.NewStore(c, append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t))}, opts...)...)
		},
		ScanRepeats: true,
	})
}

func TestUIPostgres(t *testing.T) {
	uitest.Run(t, admintest.Fixtures{
		New: func(t *testing.T, opts ...consumer.Option) (admintest.Store, error) {
			return postgres.NewStore(schemaPool(t), opts...)
		},
	})
}

// schemaPool is a pool on a fresh, migrated schema of the test server, dropped
// when t ends.
func schemaPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db := testenv.Postgres(t)
	schema := "ui_" + strings.ToLower(strings.NewReplacer(":", "_", "-", "_", "/", "_").Replace(testenv.Prefix(t)))
	if len(schema) > 60 {
		schema = "ui_" + schema[len(schema)-57:]
	}
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return pool
}
