package dynamodb

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"time"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/idemkit/idemkit/consumer"
)

// Defaults of Config.
const (
	DefaultTable       = "idemkit"
	DefaultClockSkew   = time.Second
	DefaultConcurrency = 16
	// NoClockSkew is the ClockSkew of workers that all read one clock (tests on
	// one machine): a started record is taken over as soon as its lease runs out.
	NoClockSkew time.Duration = -1
)

// Config configures a Store. The zero Config is valid: each field states its
// default. The consumer options (scope, prefix, lease, retention, attempts...)
// are passed to New beside it.
type Config struct {
	// Table is the records table: 3 to 255 letters, digits, '_', '-' and '.'.
	// Its partition key is the string attribute "pk" and its TTL attribute
	// "expires" (CreateTable makes such a table). Default "idemkit".
	Table string
	// ClockSkew is how far apart the clocks of any two workers sharing the table
	// may be. DynamoDB has no server clock in its conditions, so a lease is a
	// deadline on the clock of the worker that claimed or renewed it, and
	// another worker takes a started record over only once its own clock is past
	// that deadline plus ClockSkew. Default 1s (DefaultClockSkew); NoClockSkew
	// for none. See the package documentation for what happens beyond it.
	ClockSkew time.Duration
	// Concurrency bounds how many requests one call (a batch of claims,
	// settlements, renewals or releases) has in flight at once: DynamoDB has no
	// conditional write of many items outside transactions, so a batch is sent
	// as parallel conditional writes. Items with the same key are sent one after
	// another, in input order. Default 16.
	Concurrency int
}

var tableName = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)

func (c Config) withDefaults() Config {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	switch {
	case c.ClockSkew == 0:
		c.ClockSkew = DefaultClockSkew
	case c.ClockSkew < 0:
		c.ClockSkew = 0
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	return c
}

func (c Config) validate(given Config) error {
	switch {
	case !tableName.MatchString(c.Table):
		return configError("Config.Table %q: give 3 to 255 letters, digits, '_', '-' or '.'", c.Table)
	case given.ClockSkew < 0 && given.ClockSkew != NoClockSkew:
		return configError("Config.ClockSkew %v: give 0 (the default, %v), a positive bound, or NoClockSkew", given.ClockSkew, DefaultClockSkew)
	case c.ClockSkew%time.Millisecond != 0:
		return configError("Config.ClockSkew %v: give a whole number of milliseconds", c.ClockSkew)
	case c.Concurrency < 1:
		return configError("Config.Concurrency %d: give at least 1 (or 0 for the default, %d)", c.Concurrency, DefaultConcurrency)
	}
	return nil
}

// Client is what a Store needs of a DynamoDB client; *dynamodb.Client (package
// github.com/aws/aws-sdk-go-v2/service/dynamodb) has it. Wrap it to add
// instrumentation.
type Client interface {
	GetItem(ctx context.Context, in *ddb.GetItemInput, opts ...func(*ddb.Options)) (*ddb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *ddb.UpdateItemInput, opts ...func(*ddb.Options)) (*ddb.UpdateItemOutput, error)
	PutItem(ctx context.Context, in *ddb.PutItemInput, opts ...func(*ddb.Options)) (*ddb.PutItemOutput, error)
	// Scan serves the operator's scans (Store.ScanRecords) only.
	Scan(ctx context.Context, in *ddb.ScanInput, opts ...func(*ddb.Options)) (*ddb.ScanOutput, error)
}

var _ Client = (*ddb.Client)(nil)

// nilClient reports whether c is no client: nil, or a nil pointer in an
// interface (a nil *dynamodb.Client, the value an ignored constructor error
// leaves), which would panic at the first call.
func nilClient(c any) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// errNilClient refuses a missing client, saying what to pass.
var errNilClient = configError("nil client: pass a *dynamodb.Client made by dynamodb.NewFromConfig(awsConfig); " +
	"the one given is nil (was it made, and was the error of config.LoadDefaultConfig checked?)")

func configError(format string, args ...any) error {
	return fmt.Errorf("%w: dynamodb: "+format, append([]any{consumer.ErrInvalidConfig}, args...)...)
}
