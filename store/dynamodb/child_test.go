package dynamodb

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv/dynalite"
)

// childRole names the part a child process of the test binary plays; the
// other child* variables say what it works on.
const (
	childRole   = "IDEMKIT_DYNAMODB_CHILD"
	childPrefix = "IDEMKIT_DYNAMODB_CHILD_PREFIX"
	childKey    = "IDEMKIT_DYNAMODB_CHILD_KEY"
	childItem   = "IDEMKIT_DYNAMODB_CHILD_ITEM"
	childLease  = 1500 * time.Millisecond
)

// runChild plays a worker that claims a key, runs the handler's effect on one
// item (with Apply for role "apply", a plain UpdateItem for role "plain") and
// then hangs before its completion, waiting to be killed.
func runChild(role string) int {
	c := newClient(os.Getenv(dynalite.EnvEndpoint))
	s, err := New(c, Config{Table: testTable, ClockSkew: NoClockSkew},
		consumer.WithPrefix(os.Getenv(childPrefix)), consumer.WithLease(childLease))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	item := os.Getenv(childItem)
	r := consumer.ExecuteIdempotently(context.Background(), s, consumer.Key(os.Getenv(childKey)), nil,
		func(ctx context.Context) (int, error) {
			if _, err := credit(ctx, c, item, role == "apply"); err != nil {
				return 0, err
			}
			select {} // killed here: after the effect, before the completion
		})
	fmt.Fprintln(os.Stderr, "child: the handler returned:", r.Outcome, r.Err)
	return 1
}

// credit adds 1 to the balance of item, through Apply (exactly once per key)
// or as a plain UpdateItem; it returns the balance after it, or the balance
// found when the key was already applied (with consumer.ErrAlreadyApplied).
func credit(ctx context.Context, c *ddb.Client, item string, once bool) (int, error) {
	in := &ddb.UpdateItemInput{
		TableName:                 aws.String(testTable),
		Key:                       keyOf(item),
		UpdateExpression:          aws.String("ADD balance :one"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": avOne},
		ReturnValues:              types.ReturnValueAllNew,
	}
	var out *ddb.UpdateItemOutput
	var err error
	if once {
		out, err = Apply(ctx, c, in)
	} else {
		out, err = c.UpdateItem(ctx, in)
	}
	if out == nil {
		return 0, err
	}
	n, _ := numAttr(out.Attributes, "balance")
	return int(n), err
}
