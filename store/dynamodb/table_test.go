package dynamodb

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/consumer"
)

// TestExpiredItemReadsAsAbsent: DynamoDB deletes expired items late (and
// dynalite never does), so an item past its expiry must read as absent and be
// claimed afresh: attempt 1, its fence going on rising.
func TestExpiredItemReadsAsAbsent(t *testing.T) {
	s := mustStore(t, Config{ClockSkew: NoClockSkew}, consumer.WithRetention(time.Second), consumer.WithLease(100*time.Millisecond))
	ctx := context.Background()
	r := consumer.ExecuteIdempotently(ctx, s, "k", []byte("a"), func(ctx context.Context) (int, error) { return 1, nil })
	if r.Outcome != consumer.Success || r.Fence != 1 {
		t.Fatalf("first: %v %v fence %d", r.Outcome, r.Err, r.Fence)
	}
	var rec consumer.Record
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, _ = s.Peek(ctx, "k")
		if !rec.Found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("record still found after its retention: %+v", rec)
		}
		time.Sleep(rec.TTL + 10*time.Millisecond)
	}
	raw, err := s.read(ctx, s.RecordKey("k"))
	if err != nil || raw == nil {
		t.Fatalf("the expired item is gone (%v): this test wants one that is still stored", err)
	}
	// Another payload: no conflict with an expired record.
	var runs int
	r = consumer.ExecuteIdempotently(ctx, s, "k", []byte("b"), func(ctx context.Context) (int, error) { runs++; return 2, nil })
	if r.Outcome != consumer.Success || r.Attempt != 1 || r.Fence != 2 || runs != 1 {
		t.Fatalf("after expiry: %v %v attempt %d fence %d runs %d; want SUCCESS, attempt 1, fence 2", r.Outcome, r.Err, r.Attempt, r.Fence, runs)
	}
	if rec, _ := s.Peek(ctx, "k"); rec.State != "completed" || rec.Fingerprint != consumer.FingerprintOf([]byte("b")) || len(rec.History) != 0 {
		t.Fatalf("record %+v", rec)
	}
}

// TestErrorHistory: failed attempts keep a capped history, newest first, and a
// completion drops it.
func TestErrorHistory(t *testing.T) {
	s := mustStore(t, Config{ClockSkew: NoClockSkew}, consumer.WithMaxAttempts(6))
	ctx := context.Background()
	long := strings.Repeat("é", 5000) // 10,000 bytes: over the cap, cut on a character boundary
	msgs := []string{"one", "two", long, "four", "five"}
	for _, m := range msgs {
		r := consumer.ExecuteIdempotently(ctx, s, "h", nil, func(ctx context.Context) (int, error) { return 0, errors.New(m) })
		if r.Outcome != consumer.Error {
			t.Fatalf("%v %v", r.Outcome, r.Err)
		}
	}
	rec, err := s.Peek(ctx, "h")
	if err != nil || rec.State != "retry" || rec.Error != "five" || len(rec.History) != 4 {
		t.Fatalf("record %+v %v", rec, err)
	}
	if rec.History[0].Message != "five" || rec.History[1].Message != "four" || rec.History[3].Message != "two" {
		t.Fatalf("history %+v, want newest first", rec.History)
	}
	if h := rec.History[2].Message; len(h) > 256 || !strings.HasPrefix(long, h) {
		t.Fatalf("older error kept as %d bytes, want at most 256 of the text", len(h))
	}
	r := consumer.ExecuteIdempotently(ctx, s, "big", nil, func(ctx context.Context) (int, error) { return 0, errors.New(long) })
	if r.Outcome != consumer.Error {
		t.Fatal(r.Err)
	}
	if rec, _ := s.Peek(ctx, "big"); len(rec.Error) > 8<<10 || !strings.Contains(rec.Error, "cut from") {
		t.Fatalf("a long error kept as %d bytes", len(rec.Error))
	}
	r = consumer.ExecuteIdempotently(ctx, s, "h", nil, func(ctx context.Context) (int, error) { return 1, nil })
	if r.Outcome != consumer.Success {
		t.Fatal(r.Err)
	}
	if rec, _ := s.Peek(ctx, "h"); rec.State != "completed" || len(rec.History) != 0 || rec.Error != "" {
		t.Fatalf("completed record keeps history: %+v", rec)
	}
}

// TestCorruptRecord: an item that is not a record gives ErrCorruptRecord, and
// nothing runs.
func TestCorruptRecord(t *testing.T) {
	c := client(t)
	s := mustStore(t, Config{ClockSkew: NoClockSkew})
	ctx := context.Background()
	_, err := c.PutItem(ctx, &ddb.PutItemInput{TableName: aws.String(testTable), Item: map[string]types.AttributeValue{
		attrPK: strAV(s.RecordKey("bad")), "st": strAV("sideways"), "fence": avOne, "attempts": avOne, attrExpires: numAV(time.Now().Unix() + 3600)}})
	if err != nil {
		t.Fatal(err)
	}
	r := consumer.ExecuteIdempotently(ctx, s, "bad", nil, func(ctx context.Context) (int, error) {
		t.Error("handler ran on a corrupt record")
		return 0, nil
	})
	if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrCorruptRecord) {
		t.Fatalf("%v %v", r.Outcome, r.Err)
	}
	if _, err := s.Peek(ctx, "bad"); !errors.Is(err, consumer.ErrCorruptRecord) {
		t.Fatalf("peek: %v", err)
	}
}

func TestCreateTable(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	name := "idemkit_create_" + strings.ReplaceAll(prefix(t)[len(prefix(t))-8:], ":", "")
	for i := 0; i < 2; i++ { // again on the existing table: no error
		if err := CreateTable(ctx, c, TableSpec{Name: name}); err != nil && !errors.Is(err, ErrNoTTL) {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	d, err := c.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil || aws.ToString(d.Table.KeySchema[0].AttributeName) != attrPK || d.Table.TableStatus != types.TableStatusActive {
		t.Fatalf("table %+v %v", d, err)
	}
	other := name + "_other"
	if _, err := c.CreateTable(ctx, &ddb.CreateTableInput{TableName: aws.String(other), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}}}); err != nil {
		t.Fatal(err)
	}
	if err := CreateTable(ctx, c, TableSpec{Name: other}); err == nil || !strings.Contains(err.Error(), "another key schema") {
		t.Fatalf("a table with another key: %v", err)
	}
	for _, spec := range []TableSpec{{Name: "x"}, {ReadCapacity: 5}, {Wait: -time.Second}} {
		if err := CreateTable(ctx, c, spec); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Fatalf("%+v: %v", spec, err)
		}
	}
	for _, tn := range []string{name, other} {
		_, _ = c.DeleteTable(ctx, &ddb.DeleteTableInput{TableName: aws.String(tn)})
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	c := newClient("http://127.0.0.1:1")
	for _, tc := range []struct {
		cfg  Config
		hint string
	}{
		{Config{Table: "ab"}, "Config.Table"},
		{Config{ClockSkew: -5 * time.Second}, "NoClockSkew"},
		{Config{ClockSkew: 1500 * time.Microsecond}, "milliseconds"},
		{Config{Concurrency: -1}, "Config.Concurrency"},
	} {
		if _, err := New(c, tc.cfg); !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("%+v: %v, want ErrInvalidConfig naming %s", tc.cfg, err, tc.hint)
		}
	}
	if _, err := New(nil, Config{}); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("nil client: %v", err)
	}
	var nilStore *Store
	if r := consumer.ExecuteIdempotently(context.Background(), nilStore, "k", nil, func(ctx context.Context) (int, error) { return 0, nil }); !errors.Is(r.Err, consumer.ErrInvalidConfig) {
		t.Errorf("nil store: %v", r.Err)
	}
	s, err := New(c, Config{ClockSkew: NoClockSkew})
	if err != nil || s.Config().ClockSkew != 0 || s.Config().Table != DefaultTable || s.Config().Concurrency != DefaultConcurrency {
		t.Fatalf("defaults: %+v %v", s.Config(), err)
	}
}
