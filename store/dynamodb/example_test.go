package dynamodb_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/dynamodb"
)

// A payment handler credits an account exactly once per payment: the records
// live in the idemkit table, the credit is one UpdateItem made with Apply.
func Example() {
	ctx := context.Background()
	client := awsdynamodb.New(awsdynamodb.Options{Region: "eu-west-1"}) // usually awsdynamodb.NewFromConfig(cfg)
	if err := dynamodb.CreateTable(ctx, client, dynamodb.TableSpec{}); err != nil && !errors.Is(err, dynamodb.ErrNoTTL) {
		fmt.Println(err)
		return
	}
	store, err := dynamodb.New(client, dynamodb.Config{}, consumer.WithScope("payments"))
	if err != nil {
		fmt.Println(err)
		return
	}
	key, _ := consumer.ParseKey("payment-p-42") // an Idempotency-Key header, a message id...
	r := consumer.ExecuteIdempotently(ctx, store, key, []byte(`{"account":"a-7","amount":1200}`),
		func(ctx context.Context) (int64, error) {
			out, err := dynamodb.Apply(ctx, client, &awsdynamodb.UpdateItemInput{
				TableName:                 aws.String("accounts"),
				Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "a-7"}},
				UpdateExpression:          aws.String("ADD balance :amount"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":amount": &types.AttributeValueMemberN{Value: "1200"}},
				ReturnValues:              types.ReturnValueAllNew,
			})
			if out == nil {
				return 0, err
			}
			n, _ := out.Attributes["balance"].(*types.AttributeValueMemberN)
			if n == nil {
				return 0, err
			}
			balance, _ := strconv.ParseInt(n.Value, 10, 64)
			return balance, err // err is nil, or consumer.ErrAlreadyApplied after a crash
		})
	fmt.Println(r.Outcome, r.Value)
}

// A readiness probe: the store is ready once its table is there. Until then
// Check's error names the table and CreateTable.
func ExampleStore_Check() {
	client := awsdynamodb.New(awsdynamodb.Options{Region: "eu-west-1"}) // usually awsdynamodb.NewFromConfig(cfg)
	store, err := dynamodb.New(client, dynamodb.Config{Table: "payments_idemkit"}, consumer.WithScope("payments"))
	if err != nil {
		fmt.Println(err)
		return
	}
	ready := func(ctx context.Context) error { return store.Check(ctx) } // serve it at /readyz
	_ = ready
}
