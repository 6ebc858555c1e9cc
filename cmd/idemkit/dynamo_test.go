package main

import (
	"context"
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
	"github.com/idemkit/idemkit/store/dynamodb"
)

// The DynamoDB tests run against IDEMKIT_DYNAMODB_ENDPOINT when it is set, else
// against a private dynalite (make dynalite installs it into the repository's
// .cache/dynalite) that the first of them starts. The server reads its
// standard input, a pipe from the test binary, and exits when it closes: when
// the binary exits. internal/testenv/dynalite runs no goroutine, so the leak
// check holds.

// ddbTable is the table the tests share; each works under a prefix of its own.
const ddbTable = "idemkit_cli_test"

var (
	ddbOnce     sync.Once
	ddbEndpoint string
	ddbErr      error
	// ddbServer is a started dynalite, open for the life of the binary: its
	// standard input is a pipe from the binary, whose close stops the server.
	ddbServer *dynalite.Server
	// ddbTransport's idle connections are closed by each test that used it.
	ddbTransport = &http.Transport{MaxIdleConns: 16, MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}
)

// dynamoEndpoint is the test server's URL with the shared table made, or skips
// t (fails it under IDEMKIT_REQUIRE_SERVICES=1) when there is none.
func dynamoEndpoint(t *testing.T) string {
	t.Helper()
	ddbOnce.Do(func() {
		ddbServer, ddbErr = dynalite.Find()
		if ddbErr == nil {
			ddbEndpoint = ddbServer.Endpoint
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ddbErr = dynamodb.CreateTable(ctx, dynamoClient(ddbEndpoint), dynamodb.TableSpec{Name: ddbTable})
			if errors.Is(ddbErr, dynamodb.ErrNoTTL) {
				ddbErr = nil // dynalite: expired records read as absent all the same
			}
		}
	})
	if ddbErr != nil {
		msg := fmt.Sprintf("no DynamoDB-protocol server: %v", ddbErr)
		if testenv.Required() {
			t.Fatal(msg + " [IDEMKIT_REQUIRE_SERVICES is set]")
		}
		t.Skip(msg)
	}
	t.Cleanup(ddbTransport.CloseIdleConnections)
	return ddbEndpoint
}

// awsEnv are the AWS settings of the test server, for the binary and the
// tests' own client: the environment's when set (a real AWS endpoint), else
// any (a local server checks none).
func awsEnv() []string {
	env := []string{"AWS_EC2_METADATA_DISABLED=true"}
	for _, kv := range [][2]string{{"AWS_REGION", "us-east-1"}, {"AWS_ACCESS_KEY_ID", "idemkit"}, {"AWS_SECRET_ACCESS_KEY", "idemkit"}} {
		v := os.Getenv(kv[0])
		if v == "" {
			v = kv[1]
		}
		env = append(env, kv[0]+"="+v)
	}
	return env
}

func awsSetting(name string) string {
	for _, kv := range awsEnv() {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

func dynamoClient(endpoint string) *ddb.Client {
	return ddb.New(ddb.Options{
		Region:       awsSetting("AWS_REGION"),
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: awsSetting("AWS_ACCESS_KEY_ID"), SecretAccessKey: awsSetting("AWS_SECRET_ACCESS_KEY"),
				SessionToken: os.Getenv("AWS_SESSION_TOKEN")}, nil
		})),
		HTTPClient: &http.Client{Transport: ddbTransport},
	})
}

// dynamoStores makes DynamoDB stores on scope payments under prefix.
func dynamoStores(t *testing.T, endpoint, prefix string) newStoreFunc {
	c := dynamoClient(endpoint)
	return func(lease time.Duration) recordStore {
		s, err := dynamodb.New(c, dynamodb.Config{Table: ddbTable}, consumer.WithPrefix(prefix), consumer.WithScope("payments"),
			consumer.WithLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// The dead worker's key on DynamoDB, through the command.
func TestStuckKeyUnstuckDynamoDB(t *testing.T) {
	ep, prefix := dynamoEndpoint(t), testenv.Prefix(t)
	stuckKeyUnstuck(t, awsEnv(), []string{"--dynamodb", ddbTable, "--dynamodb-endpoint", ep, "--prefix", prefix},
		dynamoStores(t, ep, prefix))
}

// The same with the table and endpoint from the environment alone.
func TestStuckKeyUnstuckDynamoDBEnv(t *testing.T) {
	ep, prefix := dynamoEndpoint(t), testenv.Prefix(t)
	stuckKeyUnstuck(t, append(awsEnv(), "IDEMKIT_DYNAMODB_TABLE="+ddbTable, "IDEMKIT_DYNAMODB_ENDPOINT="+ep), []string{"--prefix", prefix},
		dynamoStores(t, ep, prefix))
}

// The dead replica's 36 stuck keys on DynamoDB, unstuck with --all.
func TestBulkUnstickDeadReplicaDynamoDB(t *testing.T) {
	ep, prefix := dynamoEndpoint(t), testenv.Prefix(t)
	bulkUnstickDeadReplica(t, awsEnv(), []string{"--dynamodb", ddbTable, "--dynamodb-endpoint", ep, "--prefix", prefix}, dynamoStores(t, ep, prefix))
}
