package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/dynamodb"
	"github.com/idemkit/idemkit/store/postgres"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"
)

// recordStore is what the record commands need of a store: the store SPI,
// which replays run on, and the operator SPI, which inspect, list, stats,
// unstick, forget, rerun and redrive run on.
type recordStore interface {
	consumer.Store
	admin.Store
}

var (
	_ recordStore = (*redisstore.Store)(nil)
	_ recordStore = (*postgres.Store)(nil)
	_ recordStore = (*dynamodb.Store)(nil)
)

// backend is the kind of store the records live in.
type backend int

const (
	backendRedis backend = iota
	backendPostgres
	backendDynamoDB
)

func (b backend) String() string {
	switch b {
	case backendPostgres:
		return "PostgreSQL"
	case backendDynamoDB:
		return "DynamoDB"
	}
	return "Redis"
}

// storeHelp is what the root --help says of the stores.
const storeHelp = `Stores: records live in Redis unless --postgres DSN [IDEMKIT_POSTGRES_DSN]
(add --postgres-partitioned for the time-partitioned table) or --dynamodb TABLE
[IDEMKIT_DYNAMODB_TABLE] (with --dynamodb-endpoint URL [IDEMKIT_DYNAMODB_ENDPOINT]
for DynamoDB Local or dynalite; region and credentials as the AWS SDK finds
them) names another. Give one store: two store flags are a usage error (exit
2), and so are two stores named only by the environment; a store flag wins
over the environment's others. Every record command (inspect, list, stats,
unstick, forget, rerun, plan, replay, redrive) works on every store; bench
measures Redis only and refuses the others.
`

// storeFlags are the flags that pick a store, and the ones that configure only
// one kind of store.
var (
	redisOnlyFlags = []string{"cluster", "sentinel-master", "redis-username", "redis-password", "redis-db", "redis-tls",
		"redis-tls-ca", "redis-tls-insecure"}
	postgresOnlyFlags = []string{"postgres-partitioned"}
	dynamoOnlyFlags   = []string{"dynamodb-endpoint"}
)

func (a *app) addStoreFlags(f *pflag.FlagSet) {
	f.StringVar(&a.postgresDSN, "postgres", "",
		"keep records in PostgreSQL: a pgx connection string (postgres://user@host:5432/db?sslmode=...); the tables must be migrated [IDEMKIT_POSTGRES_DSN, read when the flag is not given]")
	f.BoolVar(&a.postgresPartitioned, "postgres-partitioned", envBool("IDEMKIT_POSTGRES_PARTITIONED"),
		"with --postgres: the time-partitioned table (postgres.NewPartitionedStore) [IDEMKIT_POSTGRES_PARTITIONED]")
	f.StringVar(&a.dynamoTable, "dynamodb", env("IDEMKIT_DYNAMODB_TABLE", ""),
		"keep records in this DynamoDB table; region and credentials as the AWS SDK finds them (AWS_REGION, AWS_PROFILE, ...) [IDEMKIT_DYNAMODB_TABLE]")
	f.StringVar(&a.dynamoEndpoint, "dynamodb-endpoint", env("IDEMKIT_DYNAMODB_ENDPOINT", ""),
		"with --dynamodb: the endpoint URL, for DynamoDB Local or dynalite (region us-east-1 unless the SDK finds one) [IDEMKIT_DYNAMODB_ENDPOINT]")
}

// pickStore decides, from the flags given and the environment, which store the
// records live in. A flag wins over the environment; two stores among the flags,
// or among the environment's variables when no flag names one, are a usage
// error, and so is a flag of one kind of store given with another.
func (a *app) pickStore(f *pflag.FlagSet) error {
	if !f.Changed("postgres") {
		// The DSN may hold a password: from the environment, it stays out of --help.
		a.postgresDSN = os.Getenv("IDEMKIT_POSTGRES_DSN")
	}
	type named struct {
		b    backend
		name string
	}
	var flags, envs []named
	for _, c := range []struct {
		b         backend
		flag, env string
		set       bool
	}{
		{backendRedis, "redis", "IDEMKIT_REDIS_ADDR", os.Getenv("IDEMKIT_REDIS_ADDR") != ""},
		{backendPostgres, "postgres", "IDEMKIT_POSTGRES_DSN", a.postgresDSN != ""},
		{backendDynamoDB, "dynamodb", "IDEMKIT_DYNAMODB_TABLE", os.Getenv("IDEMKIT_DYNAMODB_TABLE") != ""},
	} {
		if f.Changed(c.flag) {
			flags = append(flags, named{c.b, "--" + c.flag})
		} else if c.set {
			envs = append(envs, named{c.b, c.env})
		}
	}
	names := func(ns []named) string {
		s := make([]string, len(ns))
		for i, n := range ns {
			s[i] = fmt.Sprintf("%s (%s)", n.name, n.b)
		}
		return strings.Join(s, " and ")
	}
	switch {
	case len(flags) > 1:
		return usagef("%s: give one store; the records of one service live in one of them", names(flags))
	case len(flags) == 1:
		a.backend = flags[0].b
	case len(envs) > 1:
		return usagef("the environment names two stores, %s: unset one, or pick the store with its flag (--redis, --postgres or --dynamodb)", names(envs))
	case len(envs) == 1:
		a.backend = envs[0].b
	}
	switch a.backend {
	case backendPostgres:
		if strings.TrimSpace(a.postgresDSN) == "" {
			return usagef("--postgres is empty: give a connection string, postgres://user@host:5432/db")
		}
	case backendDynamoDB:
		if strings.TrimSpace(a.dynamoTable) == "" {
			return usagef("--dynamodb is empty: give the records table's name")
		}
	}
	for _, g := range []struct {
		b     backend
		flags []string
	}{{backendRedis, redisOnlyFlags}, {backendPostgres, postgresOnlyFlags}, {backendDynamoDB, dynamoOnlyFlags}} {
		if g.b == a.backend {
			continue
		}
		for _, name := range g.flags {
			if f.Changed(name) {
				return usagef("--%s is a %s flag, and the records are in %s (%s): drop it, or pick %s", name, g.b, a.backend, a.storeName(), g.b)
			}
		}
	}
	return nil
}

// storeName says which store the records are in, for errors and reports. It
// names no password.
func (a *app) storeName() string {
	switch a.backend {
	case backendPostgres:
		if cfg, err := pgxpool.ParseConfig(a.postgresDSN); err == nil {
			return fmt.Sprintf("PostgreSQL at %s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
		}
		return "PostgreSQL"
	case backendDynamoDB:
		if a.dynamoEndpoint != "" {
			return fmt.Sprintf("DynamoDB table %q at %s", a.dynamoTable, a.dynamoEndpoint)
		}
		return fmt.Sprintf("DynamoDB table %q", a.dynamoTable)
	}
	return "Redis at " + a.redisAddrs
}

// store is the store in scope, as the flags pick it.
func (a *app) store(ctx context.Context, scope string) (recordStore, error) {
	if a.timeout <= 0 {
		return nil, usagef("--timeout %v: give a positive duration", a.timeout)
	}
	opts := []consumer.Option{consumer.WithPrefix(a.prefix), consumer.WithScope(scope), consumer.WithRetention(a.retention),
		consumer.WithCallTimeout(a.timeout)}
	var s recordStore
	var err error
	switch a.backend {
	case backendPostgres:
		var pool *pgxpool.Pool
		if pool, err = a.postgresPool(); err != nil {
			return nil, err
		}
		if a.postgresPartitioned {
			s, err = postgres.NewPartitionedStore(pool, opts...)
		} else {
			s, err = postgres.NewStore(pool, opts...)
		}
	case backendDynamoDB:
		var c *ddb.Client
		if c, err = a.dynamoClient(ctx); err != nil {
			return nil, err
		}
		s, err = dynamodb.New(c, dynamodb.Config{Table: a.dynamoTable}, opts...)
	default:
		c, cerr := a.redisClient()
		if cerr != nil {
			return nil, cerr
		}
		s, err = redisstore.NewStore(c, append(opts, redisstore.WithEvictionCheck(redisstore.EvictionIgnore))...)
	}
	if err != nil {
		return nil, usageError{err}
	}
	return s, nil
}

// postgresPool is a pool on --postgres; it connects at its first use, each
// connection attempt bounded by --timeout unless the DSN sets connect_timeout.
func (a *app) postgresPool() (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(a.postgresDSN)
	if err != nil {
		return nil, usagef("--postgres [IDEMKIT_POSTGRES_DSN]: %v", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = a.timeout
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, usagef("--postgres [IDEMKIT_POSTGRES_DSN]: %v", err)
	}
	a.closers = append(a.closers, pool.Close)
	return pool, nil
}

// dynamoClient is a DynamoDB client configured as the AWS SDK finds it (the
// environment, shared config and credentials files, the instance's role), at
// --dynamodb-endpoint when given.
func (a *app) dynamoClient(ctx context.Context) (*ddb.Client, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, usagef("AWS configuration for --dynamodb: %v", err)
	}
	if cfg.Region == "" {
		if a.dynamoEndpoint == "" {
			return nil, usagef("--dynamodb %q: no AWS region: set AWS_REGION, or a region in the AWS_PROFILE's config", a.dynamoTable)
		}
		cfg.Region = "us-east-1" // a local server takes any
	}
	return ddb.NewFromConfig(cfg, func(o *ddb.Options) {
		if a.dynamoEndpoint != "" {
			o.BaseEndpoint = aws.String(a.dynamoEndpoint)
		}
	}), nil
}

// storeErr names the store in an error that says it did not answer.
func (a *app) storeErr(err error) error {
	if err == nil || !errors.Is(err, consumer.ErrStoreUnavailable) {
		return err
	}
	var check string
	switch a.backend {
	case backendPostgres:
		if errors.Is(err, postgres.ErrNotMigrated) {
			return fmt.Errorf("the %s has no idemkit tables: the service migrates them (postgres.Migrate) at start-up; check --postgres names its database and search_path: %w",
				a.storeName(), err)
		}
		check = "check --postgres [IDEMKIT_POSTGRES_DSN]"
	case backendDynamoDB:
		check = "check --dynamodb, --dynamodb-endpoint, the region and credentials"
	default:
		return fmt.Errorf("the Redis server at %s did not answer (check --redis, --cluster, TLS and auth): %w", a.redisAddrs, err)
	}
	return fmt.Errorf("the %s did not answer (%s): %w", a.storeName(), check, err)
}

// needsRedis refuses a command that measures or reads Redis itself when the
// records are in another store.
func (a *app) needsRedis(command string) error {
	if a.backend == backendRedis {
		return nil
	}
	return usagef("%s works on Redis only, and the records are in %s: drop --postgres and --dynamodb (and their environment variables) to run it on --redis",
		command, a.storeName())
}
