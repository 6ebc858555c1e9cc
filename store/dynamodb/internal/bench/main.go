// Command bench measures the DynamoDB store against a private dynalite (or the
// server IDEMKIT_DYNAMODB_ENDPOINT names), in one process (make bench-dynamodb).
// Two lanes, the same number of workers each, every message a new key:
//
//   - putitem (the reference): two plain conditional PutItems per message of
//     items shaped as a record is when claimed and when completed (the first
//     conditioned on attribute_not_exists, the second on attribute_exists of
//     the key): the least a claim and a completion could cost as DynamoDB
//     writes;
//   - idemkit: ExecuteIdempotently with a trivial handler: the claim
//     (a conditional UpdateItem) and the completion (another), two requests.
//
// So both lanes send two conditional writes per message, and the ratio of their
// rates is the store's cost over the bare writes (target: at least 0.8x). For
// each lane: messages per second, requests per message, the CPU per message of
// this process and of the node process running dynalite (from /proc), Go heap
// allocations per message. Lanes run in interleaved slices so that the machine's
// noise falls on both alike; the whole measurement is repeated (-reps, default 3).
//
// A local dynalite answers in well under a millisecond and spends far more CPU
// per request than DynamoDB's own latency would let show: the figures compare
// the two lanes on this machine and say little about latency against AWS,
// where each request is a network round trip of a few milliseconds.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/benchkit"
	"github.com/idemkit/idemkit/internal/testenv/dynalite"
	store "github.com/idemkit/idemkit/store/dynamodb"
)

const table = "idemkit_bench"

func main() {
	msgs := flag.Int("msgs", 4800, "messages per lane per repetition")
	workers := flag.Int("workers", 16, "concurrent workers per lane")
	slices := flag.Int("slices", 12, "interleaved slices per lane per repetition")
	reps := flag.Int("reps", 3, "repetitions")
	flag.Parse()
	if err := run(*msgs, *workers, *slices, *reps); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// counted is a client that counts the requests it sends.
type counted struct {
	*ddb.Client
	n atomic.Int64
}

func (c *counted) GetItem(ctx context.Context, in *ddb.GetItemInput, opts ...func(*ddb.Options)) (*ddb.GetItemOutput, error) {
	c.n.Add(1)
	return c.Client.GetItem(ctx, in, opts...)
}

func (c *counted) UpdateItem(ctx context.Context, in *ddb.UpdateItemInput, opts ...func(*ddb.Options)) (*ddb.UpdateItemOutput, error) {
	c.n.Add(1)
	return c.Client.UpdateItem(ctx, in, opts...)
}

func (c *counted) PutItem(ctx context.Context, in *ddb.PutItemInput, opts ...func(*ddb.Options)) (*ddb.PutItemOutput, error) {
	c.n.Add(1)
	return c.Client.PutItem(ctx, in, opts...)
}

func (c *counted) Load() int64 { return c.n.Load() }

func run(msgs, workers, slices, reps int) error {
	srv, err := dynalite.Find()
	if err != nil {
		return err
	}
	defer srv.Close()
	pid := srv.Pid
	if srv.External {
		pid = -1
	}
	tr := &http.Transport{MaxIdleConns: 4 * workers, MaxIdleConnsPerHost: 4 * workers}
	defer tr.CloseIdleConnections()
	c := &counted{Client: ddb.New(ddb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.Endpoint), HTTPClient: &http.Client{Transport: tr},
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "bench", SecretAccessKey: "bench"}, nil
		}),
	})}
	ctx := context.Background()
	if err := store.CreateTable(ctx, c.Client, store.TableSpec{Name: table}); err != nil && !errors.Is(err, store.ErrNoTTL) {
		return err
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	s, err := store.New(c, store.Config{Table: table}, consumer.WithPrefix("bench-"+run))
	if err != nil {
		return err
	}
	fmt.Printf("dynalite at %s (node pid %d), %d workers, %d messages per lane per repetition in %d slices\n",
		srv.Endpoint, srv.Pid, workers, msgs, slices)
	fmt.Println("caveat: a local dynalite says little about latency against AWS; compare the lanes, not the absolute rates")
	env := benchkit.Env{ServerPid: pid, Calls: c}
	var seq atomic.Int64
	per := msgs / slices
	worst := 0.0
	for rep := 1; rep <= reps; rep++ {
		ref := &benchkit.Lane{Name: "putitem: 2 conditional PutItems"}
		idem := &benchkit.Lane{Name: "idemkit: claim + completion"}
		putLane := func() error {
			return fan(per, workers, func() error {
				pk := "put-" + run + "-" + strconv.FormatInt(seq.Add(1), 36)
				if _, err := c.PutItem(ctx, &ddb.PutItemInput{TableName: aws.String(table), Item: started(pk),
					ConditionExpression: aws.String("attribute_not_exists(pk)")}); err != nil {
					return err
				}
				_, err := c.PutItem(ctx, &ddb.PutItemInput{TableName: aws.String(table), Item: completed(pk),
					ConditionExpression: aws.String("attribute_exists(pk)")})
				return err
			})
		}
		idemLane := func() error {
			return fan(per, workers, func() error {
				k := consumer.Key("msg-" + strconv.FormatInt(seq.Add(1), 36))
				r := consumer.ExecuteIdempotently(ctx, s, k, []byte(k), func(ctx context.Context) (int, error) { return 1, nil })
				if r.Outcome != consumer.Success {
					return fmt.Errorf("key %s: %v %v", k, r.Outcome, r.Err)
				}
				return nil
			})
		}
		for i := 0; i < slices; i++ {
			first, second := func() error { return env.Measure(ref, per, putLane) }, func() error { return env.Measure(idem, per, idemLane) }
			if i%2 == 1 {
				first, second = second, first
			}
			if err := first(); err != nil {
				return err
			}
			if err := second(); err != nil {
				return err
			}
		}
		fmt.Printf("\nrepetition %d\n", rep)
		benchkit.Table(os.Stdout, ref, ref, idem)
		ratio := idem.Rate() / ref.Rate()
		if rep == 1 || ratio < worst {
			worst = ratio
		}
		fmt.Printf("claims + completions per second %.0f, conditional PutItems per second %.0f: %.2fx (target >= 0.80x: %s)\n",
			2*idem.Rate(), 2*ref.Rate(), ratio, benchkit.Verdict(ratio >= 0.8))
	}
	fmt.Printf("\nlowest ratio over %d repetitions: %.2fx (target >= 0.80x: %s)\n", reps, worst, benchkit.Verdict(worst >= 0.8))
	return nil
}

// started and completed are items of the size and shape of a record when
// claimed and when completed, for the reference lane.
func started(pk string) map[string]types.AttributeValue {
	now := time.Now()
	return map[string]types.AttributeValue{
		"pk": str(pk), "st": str("started"), "own": str("0123456789abcdef-1a2b"), "fence": num(1), "attempts": num(1),
		"lease": num(now.UnixMilli() + 30000), "created": num(now.Unix()), "updated": num(now.Unix()),
		"expires": num(now.Unix() + 86430), "fp": &types.AttributeValueMemberB{Value: make([]byte, 16)},
	}
}

func completed(pk string) map[string]types.AttributeValue {
	now := time.Now()
	return map[string]types.AttributeValue{
		"pk": str(pk), "st": str("completed"), "fence": num(1), "attempts": num(1), "created": num(now.Unix()),
		"updated": num(now.Unix()), "expires": num(now.Unix() + 86400),
		"fp": &types.AttributeValueMemberB{Value: make([]byte, 16)}, "res": &types.AttributeValueMemberB{Value: []byte("1")},
	}
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// fan runs one(), n times in all, on workers goroutines.
func fan(n, workers int, one func() error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := one(); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
