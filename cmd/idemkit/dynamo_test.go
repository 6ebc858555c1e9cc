package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/dynamodb"
)

// The DynamoDB tests run against IDEMKIT_DYNAMODB_ENDPOINT when it is set, else
// against a private dynalite (make dynalite installs it into the repository's
// .cache/dynalite) that the first of them starts. The server reads its
// standard input, a pipe from the test binary, and exits when it closes: when
// the binary exits. Nothing here runs a goroutine, so the leak check holds.

// ddbTable is the table the tests share; each works under a prefix of its own.
const ddbTable = "idemkit_cli_test"

var (
	ddbOnce     sync.Once
	ddbEndpoint string
	ddbErr      error
	// ddbStdin is dynalite's standard input, open for the life of the binary:
	// its close stops the server.
	ddbStdin *os.File
	// ddbTransport's idle connections are closed by each test that used it.
	ddbTransport = &http.Transport{MaxIdleConns: 16, MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}
)

// dynamoEndpoint is the test server's URL with the shared table made, or skips
// t (fails it under IDEMKIT_REQUIRE_SERVICES=1) when there is none.
func dynamoEndpoint(t *testing.T) string {
	t.Helper()
	ddbOnce.Do(func() {
		ddbEndpoint = strings.TrimRight(strings.TrimSpace(os.Getenv("IDEMKIT_DYNAMODB_ENDPOINT")), "/")
		if ddbEndpoint == "" {
			ddbEndpoint, ddbErr = startDynalite()
		}
		if ddbErr == nil {
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

// startDynalite starts dynalite on a free loopback port, its tables in memory,
// and returns its URL once it listens.
func startDynalite() (string, error) {
	dir, err := dynaliteDir()
	if err != nil {
		return "", err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("node is not on PATH (Debian: apt-get install nodejs npm): %w", err)
	}
	script := `var s = require(process.argv[1])({createTableMs: 0, deleteTableMs: 0, updateTableMs: 0});
s.listen(0, '127.0.0.1', function () { console.log('port ' + s.address().port); });
process.stdin.on('end', function () { process.exit(0); });
process.stdin.on('error', function () { process.exit(0); });
process.stdin.resume();`
	inR, inW, err := os.Pipe()
	if err != nil {
		return "", err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(node, "-e", script, dir)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	err = cmd.Start()
	_ = inR.Close()
	_ = outW.Close()
	if err != nil {
		return "", fmt.Errorf("starting dynalite: %w", err)
	}
	ddbStdin = inW
	_ = outR.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(outR).ReadString('\n')
	_ = outR.Close() // the server prints nothing more
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "port ")
	if err != nil || !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return "", fmt.Errorf("dynalite in %s did not say its port (%q): %v", dir, line, err)
	}
	return "http://127.0.0.1:" + port, nil
}

// dynaliteDir finds the installed dynalite package: the repository's
// .cache/dynalite (from the working directory upwards), then the dynalite
// command on PATH.
func dynaliteDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, ".cache", "dynalite", "node_modules", "dynalite")
		if _, err := os.Stat(filepath.Join(p, "index.js")); err == nil {
			return p, nil
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	if bin, err := exec.LookPath("dynalite"); err == nil {
		if real, err := filepath.EvalSymlinks(bin); err == nil {
			if _, err := os.Stat(filepath.Join(filepath.Dir(real), "index.js")); err == nil {
				return filepath.Dir(real), nil
			}
		}
	}
	return "", errors.New("dynalite is not installed: run `make dynalite`, or set IDEMKIT_DYNAMODB_ENDPOINT to a DynamoDB endpoint")
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
