package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// app is one run of the command: its flags and where it writes.
type app struct {
	out, errOut io.Writer
	json        bool

	redisAddrs     string
	cluster        bool
	sentinelMaster string
	redisUser      string
	redisPass      string
	redisDB        int
	redisTLS       bool
	redisCA        string
	redisInsecure  bool
	prefix, scope  string
	retention      time.Duration
	timeout        time.Duration

	kafkaBrokers string
	kafkaTLS     bool
	kafkaCA      string
	kafkaSASL    string
	kafkaUser    string
	kafkaPass    string

	amqpURL string

	postgresDSN         string
	postgresPartitioned bool
	dynamoTable         string
	dynamoEndpoint      string
	backend             backend // the store the records are in: pickStore

	closers []func()
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func env(name, dflt string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return dflt
}

func envBool(name string) bool {
	v, _ := strconv.ParseBool(os.Getenv(name))
	return v
}

func envDuration(name string, dflt time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return dflt
}

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	a := &app{out: out, errOut: errOut}
	redis.SetLogger(quiet{}) // dial failures are reported once, as the command's error
	defer func() {
		for _, c := range a.closers {
			c()
		}
	}()
	root := a.root()
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(errOut)
	err := root.ExecuteContext(ctx)
	var ie interruptedError
	if err != nil && ctx.Err() != nil && !errors.As(err, &ie) {
		err = interruptedError{err: err}
	}
	if err != nil {
		fmt.Fprintln(errOut, "idemkit:", err)
	}
	return exitCode(err)
}

// rootHelp is the root command's --help text.
func rootHelp() string {
	return `idemkit operates the idempotency records of services built on idemkit.

Give the store and the --prefix and --scope (WithPrefix, WithScope) the service
gives. Every flag has an environment variable (in brackets).

` + storeHelp + `
` + scopeHelp + `
` + exitCodeHelp()
}

// scopeHelp is the rule for scopes, as --help states it.
const scopeHelp = `Scopes: the commands that change records or run commands for messages (unstick,
forget, rerun, replay, redrive) need the service's --scope [IDEMKIT_SCOPE] and
refuse the default scope "default", dry runs included: services that handle the
same messages each keep records of their own, and a command given no scope would
act on none of them. The commands that only read (inspect, list, stats, plan)
work on any scope and say which one they read: with no --scope, inspect and plan
read "default", list and stats every scope.
`

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:           "idemkit",
		Short:         "Operate idemkit: inspect, list and count idempotency records, unstick, forget and rerun keys, plan and run replays",
		Long:          rootHelp(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// Secrets come from the environment without showing up as flag defaults in --help.
			if a.redisPass == "" {
				a.redisPass = os.Getenv("IDEMKIT_REDIS_PASSWORD")
			}
			if a.kafkaPass == "" {
				a.kafkaPass = os.Getenv("IDEMKIT_KAFKA_PASSWORD")
			}
			return a.pickStore(cmd.Flags())
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	f := root.PersistentFlags()
	f.BoolVar(&a.json, "json", envBool("IDEMKIT_JSON"), "print JSON instead of tables [IDEMKIT_JSON]")
	f.StringVar(&a.redisAddrs, "redis", env("IDEMKIT_REDIS_ADDR", "127.0.0.1:6379"),
		"Redis address; several, comma-separated, with --cluster (seed nodes) or --sentinel-master (sentinels) [IDEMKIT_REDIS_ADDR]")
	f.BoolVar(&a.cluster, "cluster", envBool("IDEMKIT_REDIS_CLUSTER"), "Redis is a cluster: every primary is scanned [IDEMKIT_REDIS_CLUSTER]")
	f.StringVar(&a.sentinelMaster, "sentinel-master", env("IDEMKIT_REDIS_SENTINEL_MASTER", ""),
		"find the primary through Sentinel under this master name; --redis names the sentinels [IDEMKIT_REDIS_SENTINEL_MASTER]")
	f.StringVar(&a.redisUser, "redis-username", env("IDEMKIT_REDIS_USERNAME", ""), "Redis ACL user [IDEMKIT_REDIS_USERNAME]")
	f.StringVar(&a.redisPass, "redis-password", "", "Redis password [IDEMKIT_REDIS_PASSWORD, read when the flag is not given]")
	f.IntVar(&a.redisDB, "redis-db", 0, "Redis logical database (not on a cluster)")
	f.BoolVar(&a.redisTLS, "redis-tls", envBool("IDEMKIT_REDIS_TLS"), "connect to Redis over TLS [IDEMKIT_REDIS_TLS]")
	f.StringVar(&a.redisCA, "redis-tls-ca", env("IDEMKIT_REDIS_TLS_CA", ""), "PEM file of the CA that signed Redis's certificate [IDEMKIT_REDIS_TLS_CA]")
	f.BoolVar(&a.redisInsecure, "redis-tls-insecure", false, "do not verify Redis's certificate (testing only)")
	f.StringVar(&a.prefix, "prefix", env("IDEMKIT_PREFIX", consumer.DefaultPrefix), "record key prefix, as the service's WithPrefix [IDEMKIT_PREFIX]")
	f.StringVar(&a.scope, "scope", env("IDEMKIT_SCOPE", ""),
		"scope, as the service's WithScope: required by unstick, forget, rerun, replay and redrive, which refuse \"default\"; when empty, list and stats read every scope, inspect and plan \"default\" [IDEMKIT_SCOPE]")
	f.DurationVar(&a.retention, "retention", envDuration("IDEMKIT_RETENTION", consumer.DefaultRetention),
		"the service's retention (WithRetention): what forget and rerun keep records for, and the replay's retention guard [IDEMKIT_RETENTION]")
	f.DurationVar(&a.timeout, "timeout", envDuration("IDEMKIT_TIMEOUT", 5*time.Second), "bound of each call to the store, and of each connection attempt [IDEMKIT_TIMEOUT]")
	f.StringVar(&a.kafkaBrokers, "kafka-brokers", env("IDEMKIT_KAFKA_BROKERS", "127.0.0.1:9092"), "Kafka seed brokers, comma-separated [IDEMKIT_KAFKA_BROKERS]")
	f.BoolVar(&a.kafkaTLS, "kafka-tls", envBool("IDEMKIT_KAFKA_TLS"), "connect to Kafka over TLS [IDEMKIT_KAFKA_TLS]")
	f.StringVar(&a.kafkaCA, "kafka-tls-ca", env("IDEMKIT_KAFKA_TLS_CA", ""), "PEM file of the CA that signed the brokers' certificates [IDEMKIT_KAFKA_TLS_CA]")
	f.StringVar(&a.kafkaSASL, "kafka-sasl", env("IDEMKIT_KAFKA_SASL", ""), "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 [IDEMKIT_KAFKA_SASL]")
	f.StringVar(&a.kafkaUser, "kafka-username", env("IDEMKIT_KAFKA_USERNAME", ""), "SASL user [IDEMKIT_KAFKA_USERNAME]")
	f.StringVar(&a.kafkaPass, "kafka-password", "", "SASL password [IDEMKIT_KAFKA_PASSWORD, read when the flag is not given]")
	f.StringVar(&a.amqpURL, "amqp-url", env("IDEMKIT_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
		"RabbitMQ URL; amqps:// for TLS, credentials and vhost in the URL [IDEMKIT_AMQP_URL]")
	a.addStoreFlags(f)

	root.AddCommand(a.inspectCmd(), a.listCmd(), a.statsCmd(),
		a.changeCmd(consumer.OpUnstick, "end a started claim whose owner is gone: the next delivery runs the key", (*admin.Inspector).Unstick),
		a.changeCmd(consumer.OpForget, "remove a record but keep its fence: the next delivery runs the key afresh", (*admin.Inspector).Forget),
		a.changeCmd(consumer.OpRerun, "let a completed or failed key run once more at its next delivery", (*admin.Inspector).Rerun),
		a.keygenCmd(), a.benchCmd(), a.planCmd(), a.replayCmd(), a.redriveCmd(), a.uiCmd())
	return root
}

func tlsConfig(ca string, insecure bool) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure} //nolint:gosec // only when the operator asks
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, usagef("TLS CA file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("TLS CA file %s holds no PEM certificate", ca)
		}
		c.RootCAs = pool
	}
	return c, nil
}

// redisClient connects as the flags say.
func (a *app) redisClient() (redis.UniversalClient, error) {
	addrs := strings.Split(a.redisAddrs, ",")
	for i := range addrs {
		addrs[i] = strings.TrimSpace(addrs[i])
		if addrs[i] == "" {
			return nil, usagef("--redis %q: give host:port addresses, comma-separated", a.redisAddrs)
		}
	}
	var tc *tls.Config
	if a.redisTLS || a.redisCA != "" {
		var err error
		if tc, err = tlsConfig(a.redisCA, a.redisInsecure); err != nil {
			return nil, err
		}
	}
	var c redis.UniversalClient
	switch {
	case a.cluster && a.sentinelMaster != "":
		return nil, usagef("--cluster and --sentinel-master: give one")
	case a.cluster:
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Username: a.redisUser, Password: a.redisPass, TLSConfig: tc,
			DialTimeout: a.timeout, ContextTimeoutEnabled: true, MaxRedirects: 3})
	case a.sentinelMaster != "":
		c = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: a.sentinelMaster, SentinelAddrs: addrs, Username: a.redisUser,
			Password: a.redisPass, DB: a.redisDB, TLSConfig: tc, DialTimeout: a.timeout, ContextTimeoutEnabled: true})
	case len(addrs) > 1:
		return nil, usagef("--redis names %d addresses: add --cluster or --sentinel-master, or give one", len(addrs))
	default:
		c = redis.NewClient(&redis.Options{Addr: addrs[0], Username: a.redisUser, Password: a.redisPass, DB: a.redisDB, TLSConfig: tc,
			DialTimeout: a.timeout, ContextTimeoutEnabled: true, MaxRetries: 1})
	}
	a.closers = append(a.closers, func() { _ = c.Close() })
	return c, nil
}

// noScope says, in an output or an error, that no --scope was given.
const noScope = "no --scope was given: give the service's --scope to read its records"

// readStore is the store of the commands that only read records one scope at a
// time (inspect, plan): in the scope --scope names, else in the default one.
func (a *app) readStore(ctx context.Context) (recordStore, error) {
	if a.scope == "" {
		return a.store(ctx, consumer.DefaultScope)
	}
	return a.store(ctx, a.scope)
}

// writeStore is the store of a command that changes records or runs commands for
// messages. It needs the service's --scope: a store on the default scope is
// refused by consumer.Settings.CheckScope, before anything is read or changed.
func (a *app) writeStore(ctx context.Context, command string) (recordStore, error) {
	s, err := a.readStore(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Settings().CheckScope(); err != nil {
		given := "no --scope was given"
		if a.scope != "" {
			given = fmt.Sprintf("--scope %q is the default scope", a.scope)
		}
		return nil, usageError{fmt.Errorf("%s changes records, and %s: give --scope [IDEMKIT_SCOPE] the scope the service passes to consumer.WithScope: %w",
			command, given, err)}
	}
	return s, nil
}

// inspector is the operator API over store, or over the read store when store
// is nil.
func (a *app) inspector(ctx context.Context, store admin.Store) (*admin.Inspector, error) {
	if store == nil {
		s, err := a.readStore(ctx)
		if err != nil {
			return nil, err
		}
		store = s
	}
	return admin.New(store)
}

// kafkaOpts are the franz-go options for the flags' cluster.
func (a *app) kafkaOpts() ([]kgo.Opt, error) {
	brokers := strings.Split(a.kafkaBrokers, ",")
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DialTimeout(a.timeout), kgo.RequestRetries(2),
		kgo.RetryTimeout(a.timeout)}
	if a.kafkaTLS || a.kafkaCA != "" {
		tc, err := tlsConfig(a.kafkaCA, false)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch strings.ToUpper(a.kafkaSASL) {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: a.kafkaUser, Pass: a.kafkaPass}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: a.kafkaUser, Pass: a.kafkaPass}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: a.kafkaUser, Pass: a.kafkaPass}.AsSha512Mechanism()))
	default:
		return nil, usagef("--kafka-sasl %q: give PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", a.kafkaSASL)
	}
	return opts, nil
}
