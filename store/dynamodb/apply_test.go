package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/internal/testenv/dynalite"
)

// balance reads an account item's balance (0 when it has none).
func balance(t *testing.T, c *ddb.Client, item string) int {
	t.Helper()
	out, err := c.GetItem(context.Background(), &ddb.GetItemInput{TableName: aws.String(testTable), Key: keyOf(item), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := numAttr(out.Item, "balance")
	return int(n)
}

func marks(t *testing.T, c *ddb.Client, item string) int {
	t.Helper()
	out, err := c.GetItem(context.Background(), &ddb.GetItemInput{TableName: aws.String(testTable), Key: keyOf(item), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := out.Item[DefaultMarksAttribute].(*types.AttributeValueMemberL)
	if l == nil {
		return 0
	}
	return len(l.Value)
}

// TestApplyCrashBetweenWriteAndCompletion: a worker process is SIGKILLed after
// its handler's conditional write and before idemkit recorded the completion.
// The redelivery takes the claim over once the lease has run out and runs the
// handler again: with Apply the write is refused by the item's mark and the
// key is recorded done (DUPLICATE), one credit in all; with a plain UpdateItem
// (the control) the credit is applied twice, which is what Apply prevents.
func TestApplyCrashBetweenWriteAndCompletion(t *testing.T) {
	for _, tc := range []struct {
		role    string
		credits int
		outcome consumer.Outcome
	}{
		{"apply", 1, consumer.Duplicate},
		{"plain", 2, consumer.Success},
	} {
		t.Run(tc.role, func(t *testing.T) {
			c := client(t)
			pre, item := prefix(t), "acct:"+prefix(t)
			key := consumer.Key("payment-" + tc.role)
			child := testenv.StartSelf(t, childRole+"="+tc.role, childPrefix+"="+pre, childKey+"="+string(key),
				childItem+"="+item, dynalite.EnvEndpoint+"="+server.Endpoint)
			testenv.Eventually(t, 30*time.Second, "the child's credit", func() bool { return balance(t, c, item) == 1 })
			if err := child.Process.Kill(); err != nil { // SIGKILL: no completion, no release
				t.Fatal(err)
			}
			_ = child.Wait()

			s, err := New(c, Config{Table: testTable, ClockSkew: NoClockSkew}, consumer.WithPrefix(pre),
				consumer.WithLease(childLease), consumer.WithWaitInProgress(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if rec, _ := s.Peek(context.Background(), key); rec.State != "started" || rec.Fence != 1 {
				t.Fatalf("record after the kill = %+v, want the child's started claim", rec)
			}
			var runs atomic.Int32
			r := consumer.ExecuteIdempotently(context.Background(), s, key, nil, func(ctx context.Context) (int, error) {
				runs.Add(1)
				return credit(ctx, c, item, tc.role == "apply")
			})
			if r.Outcome != tc.outcome || r.Err != nil || r.Fence != 2 || runs.Load() != 1 {
				t.Fatalf("redelivery: %v %v fence %d after %d runs; want %v, fence 2, 1 run", r.Outcome, r.Err, r.Fence, runs.Load(), tc.outcome)
			}
			if got := balance(t, c, item); got != tc.credits {
				t.Fatalf("balance %d after the crash and the redelivery, want %d", got, tc.credits)
			}
			if r.Value != tc.credits {
				t.Fatalf("result %d, want the balance %d", r.Value, tc.credits)
			}
			if rec, _ := s.Peek(context.Background(), key); rec.State != "completed" {
				t.Fatalf("record = %+v, want completed", rec)
			}
		})
	}
}

// TestApplyMarks: one application per key, whatever the number of runs, while
// the key's mark is kept; the marks stay bounded (and a key whose mark was cut
// is applied again: the bound WithMarks states); the caller's own condition
// and expressions are kept.
func TestApplyMarks(t *testing.T) {
	c := client(t)
	s := mustStore(t, Config{ClockSkew: NoClockSkew})
	ctx := context.Background()
	item := "acct:" + prefix(t)
	const keys, n = 60, 4
	for k := 0; k < keys; k++ {
		key := consumer.Key(fmt.Sprint("credit-", k))
		// Each key's handler runs and applies; then its record is forgotten by
		// this test (another prefix would do the same): the mark still refuses it.
		r := consumer.ExecuteIdempotently(ctx, s, key, nil, func(ctx context.Context) (int, error) {
			return credit(ctx, c, item, true)
		})
		if r.Outcome != consumer.Success || r.Value != k+1 {
			t.Fatalf("key %d: %v %v value %d", k, r.Outcome, r.Err, r.Value)
		}
	}
	// A second store in the same scope has no records: its handlers run, and
	// Apply finds every key of the last n marked.
	again := mustStore(t, Config{ClockSkew: NoClockSkew})
	for k := keys - n; k < keys; k++ {
		var runs int
		r := consumer.ExecuteIdempotently(ctx, again, consumer.Key(fmt.Sprint("credit-", k)), nil, func(ctx context.Context) (int, error) {
			runs++
			return credit(ctx, c, item, true)
		})
		if r.Outcome != consumer.Duplicate || r.Err != nil || r.Value != keys || runs != 1 {
			t.Fatalf("key %d again: %v %v value %d runs %d; want DUPLICATE with the balance %d", k, r.Outcome, r.Err, r.Value, runs, keys)
		}
	}
	if got := balance(t, c, item); got != keys {
		t.Fatalf("balance %d, want %d", got, keys)
	}
	if m := marks(t, c, item); m < DefaultMarks || m > DefaultMarks*3/2 {
		t.Fatalf("%d marks kept, want %d to %d", m, DefaultMarks, DefaultMarks*3/2)
	}
	// The first key's mark was cut when the list passed 3/2 of the bound.
	first := consumer.ExecuteIdempotently(ctx, again, "credit-0", nil, func(ctx context.Context) (int, error) {
		return credit(ctx, c, item, true)
	})
	if first.Outcome != consumer.Success || first.Value != keys+1 {
		t.Fatalf("the oldest key again: %v %v value %d; want applied again past the bound", first.Outcome, first.Err, first.Value)
	}

	// The caller's condition is kept: a refused one comes back as such.
	r := consumer.ExecuteIdempotently(ctx, s, "overdraft", nil, func(ctx context.Context) (int, error) {
		_, err := Apply(ctx, c, &ddb.UpdateItemInput{
			TableName: aws.String(testTable), Key: keyOf(item),
			UpdateExpression:          aws.String("SET #b = #b - :amt"),
			ConditionExpression:       aws.String("#b >= :amt"),
			ExpressionAttributeNames:  map[string]string{"#b": "balance"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":amt": numAV(1000)},
		})
		return 0, consumer.Permanent(err)
	})
	var ccf *types.ConditionalCheckFailedException
	if r.Outcome != consumer.Error || !errors.As(r.Err, &ccf) {
		t.Fatalf("overdraft: %v %v, want the caller's refused condition", r.Outcome, r.Err)
	}
	if got := balance(t, c, item); got != keys+1 {
		t.Fatalf("balance %d after a refused debit", got)
	}
	if _, err := Apply(ctx, c, &ddb.UpdateItemInput{UpdateExpression: aws.String("SET a = :b")}); !errors.Is(err, ErrNotInHandler) {
		t.Fatalf("Apply outside a handler: %v", err)
	}
}

// TestApplyPut: a PutItem applied once per key, the item's other marks kept.
func TestApplyPut(t *testing.T) {
	c := client(t)
	s := mustStore(t, Config{ClockSkew: NoClockSkew})
	ctx := context.Background()
	item := "order:" + prefix(t)
	put := func(ctx context.Context, status string) (string, error) {
		out, err := ApplyPut(ctx, c, &ddb.PutItemInput{TableName: aws.String(testTable), Item: map[string]types.AttributeValue{
			attrPK: strAV(item), "status": strAV(status)}}, []string{attrPK})
		if errors.Is(err, consumer.ErrAlreadyApplied) {
			return out.Attributes["status"].(*types.AttributeValueMemberS).Value, err
		}
		return status, err
	}
	for _, st := range []string{"placed", "paid", "shipped"} {
		r := consumer.ExecuteIdempotently(ctx, s, consumer.Key(st), nil, func(ctx context.Context) (string, error) { return put(ctx, st) })
		if r.Outcome != consumer.Success || r.Err != nil {
			t.Fatalf("%s: %v %v", st, r.Outcome, r.Err)
		}
	}
	again := mustStore(t, Config{ClockSkew: NoClockSkew})
	r := consumer.ExecuteIdempotently(ctx, again, "paid", nil, func(ctx context.Context) (string, error) { return put(ctx, "paid") })
	if r.Outcome != consumer.Duplicate || r.Value != "shipped" {
		t.Fatalf("paid again: %v %v %q; want DUPLICATE with the item's status now", r.Outcome, r.Err, r.Value)
	}
	if m := marks(t, c, item); m != 3 {
		t.Fatalf("%d marks, want 3", m)
	}
}
