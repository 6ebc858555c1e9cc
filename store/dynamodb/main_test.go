package dynamodb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/internal/testenv/dynalite"
	"go.uber.org/goleak"
)

// The tests run against the server dynalite.Find gives: IDEMKIT_DYNAMODB_ENDPOINT,
// or a private dynalite. Without one they skip, or fail under
// IDEMKIT_REQUIRE_SERVICES=1.

// testTable is the table the tests share; each store works under its own prefix.
const testTable = "idemkit_test"

var (
	server    *dynalite.Server
	serverErr error
	transport = &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}
	tableOnce sync.Once
	tableErr  error
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childRole); role != "" {
		os.Exit(runChild(role))
	}
	server, serverErr = dynalite.Find()
	code := m.Run()
	transport.CloseIdleConnections()
	server.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "dynamodb: goroutines leaked by the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// endpoint returns the server's URL, skipping or failing t without one.
func endpoint(t testing.TB) string {
	t.Helper()
	if serverErr != nil {
		msg := fmt.Sprintf("no DynamoDB-protocol server: %v", serverErr)
		if testenv.Required() {
			t.Fatal(msg + " [IDEMKIT_REQUIRE_SERVICES is set]")
		}
		t.Skip(msg)
	}
	return server.Endpoint
}

// newClient is a client of the server at url: static credentials (a local
// server checks none; AWS takes the environment's when url is AWS's, see
// IDEMKIT_DYNAMODB_ENDPOINT), the SDK's default retries unless opts say
// otherwise.
func newClient(url string, opts ...func(*ddb.Options)) *ddb.Client {
	o := ddb.Options{
		Region:       envOr("AWS_REGION", "us-east-1"),
		BaseEndpoint: aws.String(url),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: envOr("AWS_ACCESS_KEY_ID", "idemkit"),
				SecretAccessKey: envOr("AWS_SECRET_ACCESS_KEY", "idemkit"), SessionToken: os.Getenv("AWS_SESSION_TOKEN")}, nil
		}),
		HTTPClient: &http.Client{Transport: transport},
	}
	for _, f := range opts {
		f(&o)
	}
	return ddb.New(o)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// client returns a client of the test server with the shared table made.
func client(t testing.TB) *ddb.Client {
	t.Helper()
	c := newClient(endpoint(t))
	tableOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tableErr = CreateTable(ctx, c, TableSpec{Name: testTable})
		if errors.Is(tableErr, ErrNoTTL) {
			tableErr = nil // dynalite: expired records read as absent all the same
		}
	})
	if tableErr != nil {
		t.Fatalf("test table: %v", tableErr)
	}
	return c
}

// prefix is a key prefix unique to t.
func prefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	return "test:" + name + ":" + hex.EncodeToString(b[:])
}

// newStore is a store on the shared table under a prefix of its own; opts come
// after the prefix, so a test may still set one.
func newStore(t testing.TB, cfg Config, opts ...consumer.Option) (*Store, error) {
	t.Helper()
	c := client(t)
	if cfg.Table == "" {
		cfg.Table = testTable
	}
	return New(c, cfg, append([]consumer.Option{consumer.WithPrefix(prefix(t))}, opts...)...)
}

func mustStore(t testing.TB, cfg Config, opts ...consumer.Option) *Store {
	t.Helper()
	s, err := newStore(t, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
