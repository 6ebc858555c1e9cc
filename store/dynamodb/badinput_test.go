package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/consumer/consumertest"
)

// missingTable is a table the tests never create.
const missingTable = "idemkit_no_such_table"

// TestBadInput runs the conformance suite's bad-input section: a typed-nil
// client, a missing table, and items at a record's key that are not records,
// one for every attribute of the layout given the wrong type.
func TestBadInput(t *testing.T) {
	consumertest.RunBadInput(t, consumertest.BadInputFixtures{
		New: func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
			return newStore(t, Config{ClockSkew: NoClockSkew}, opts...)
		},
		NilStore: consumer.Store((*Store)(nil)),
		NilClient: func(t *testing.T) (consumer.Store, error) {
			var c *ddb.Client // what an ignored constructor error leaves
			return New(c, Config{})
		},
		NilClientHint: "*dynamodb.Client",
		Missing: func(t *testing.T) (consumer.Store, error) {
			return New(client(t), Config{Table: missingTable, ClockSkew: NoClockSkew}, consumer.WithPrefix(prefix(t)))
		},
		MissingHints: []string{missingTable, "CreateTable"},
		Foreign:      foreignItems(),
	})
}

// foreignItems are items at a record's key that are not records: a record whose
// one attribute has the wrong type (or is missing where its state needs it),
// for every attribute of the layout.
func foreignItems() []consumertest.ForeignValue {
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	b := func(v string) types.AttributeValue { return &types.AttributeValueMemberB{Value: []byte(v)} }
	boolAV := &types.AttributeValueMemberBOOL{Value: true}
	entry := func(t, m types.AttributeValue) types.AttributeValue {
		return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"t": t, "m": m}}
	}
	okEntry := entry(n("1700000000"), strAV("boom"))
	cases := []struct {
		name  string
		state string
		set   map[string]types.AttributeValue
		drop  string
	}{
		{"state is a number", stateDone, map[string]types.AttributeValue{"st": n("1")}, ""},
		{"state is unknown", "sideways", nil, ""},
		{"fence is a string", stateDone, map[string]types.AttributeValue{"fence": strAV("1")}, ""},
		{"attempts is a string", stateDone, map[string]types.AttributeValue{"attempts": strAV("1")}, ""},
		{"expires is a string", stateDone, map[string]types.AttributeValue{attrExpires: strAV("9999999999")}, ""},
		{"created is a string", stateDone, map[string]types.AttributeValue{"created": strAV("1")}, ""},
		{"updated is binary", stateDone, map[string]types.AttributeValue{"updated": b("1")}, ""},
		{"fingerprint is a string", stateDone, map[string]types.AttributeValue{"fp": strAV("0123456789abcdef")}, ""},
		{"fingerprint is 3 bytes", stateDone, map[string]types.AttributeValue{"fp": b("abc")}, ""},
		{"result is a string", stateDone, map[string]types.AttributeValue{"res": strAV("42")}, ""},
		{"result is a number", stateDone, map[string]types.AttributeValue{"res": n("42")}, ""},
		{"completed without a result", stateDone, nil, "res"},
		{"dropped is a number", stateDone, map[string]types.AttributeValue{"dropped": n("5")}, "res"},
		{"owner is a number", stateStarted, map[string]types.AttributeValue{"own": n("7")}, ""},
		{"started without an owner", stateStarted, nil, "own"},
		{"lease is a string", stateStarted, map[string]types.AttributeValue{"lease": strAV("soon")}, ""},
		{"started without a lease", stateStarted, nil, "lease"},
		{"locked is a string", stateStarted, map[string]types.AttributeValue{"locked": strAV("yes")}, ""},
		{"counted is a number", stateStarted, map[string]types.AttributeValue{"cnt": n("1")}, ""},
		{"permanent is a number", stateFailed, map[string]types.AttributeValue{"perm": n("1")}, ""},
		{"last error is a string", stateRetry, map[string]types.AttributeValue{"h0": strAV("boom")}, ""},
		{"last error's time is a string", stateRetry, map[string]types.AttributeValue{"h0": entry(strAV("now"), strAV("boom"))}, ""},
		{"last error's text is a number", stateRetry, map[string]types.AttributeValue{"h0": entry(n("1"), n("2"))}, ""},
		{"short last error is a list", stateRetry, map[string]types.AttributeValue{"h0": okEntry, "hs": &types.AttributeValueMemberL{}}, ""},
		{"older error is a string", stateRetry, map[string]types.AttributeValue{"h0": okEntry, "h1": strAV("old")}, ""},
		{"oldest error is a boolean", stateFailed, map[string]types.AttributeValue{"h0": okEntry, "h3": boolAV}, ""},
	}
	out := make([]consumertest.ForeignValue, 0, len(cases))
	for _, tc := range cases {
		out = append(out, consumertest.ForeignValue{Name: tc.name, Write: func(t *testing.T, s consumer.Store, key consumer.Key) func() string {
			st := s.(*Store)
			item := recordItem(st.RecordKey(key), tc.state)
			maps.Copy(item, tc.set)
			delete(item, tc.drop)
			return writeItem(t, st, item)
		}})
	}
	return out
}

// recordItem is a well-formed live record in state, the base the foreign
// items change one attribute of.
func recordItem(pk, state string) map[string]types.AttributeValue {
	now := time.Now()
	m := map[string]types.AttributeValue{
		attrPK: strAV(pk), "st": strAV(state), "fence": avOne, "attempts": avOne,
		"created": numAV(now.Unix()), "updated": numAV(now.Unix()), attrExpires: numAV(now.Add(time.Hour).Unix()),
	}
	switch state {
	case stateDone:
		m["res"] = &types.AttributeValueMemberB{Value: []byte("1")}
	case stateStarted:
		m["own"], m["lease"] = strAV("someone"), numAV(now.Add(time.Hour).UnixMilli())
	}
	return m
}

// writeItem puts item into st's table and returns a function that reads it
// back, rendered canonically.
func writeItem(t *testing.T, st *Store, item map[string]types.AttributeValue) func() string {
	t.Helper()
	ctx := context.Background()
	if _, err := st.c.PutItem(ctx, &ddb.PutItemInput{TableName: st.table, Item: item}); err != nil {
		t.Fatal(err)
	}
	pk := item[attrPK].(*types.AttributeValueMemberS).Value
	return func() string {
		out, err := st.c.GetItem(ctx, &ddb.GetItemInput{TableName: st.table, Key: keyOf(pk), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return render(&types.AttributeValueMemberM{Value: out.Item})
	}
}

// render writes v canonically: map keys in order.
func render(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberM:
		var sb strings.Builder
		sb.WriteString("{")
		for _, k := range slices.Sorted(maps.Keys(v.Value)) {
			fmt.Fprintf(&sb, "%s:%s,", k, render(v.Value[k]))
		}
		return sb.String() + "}"
	case *types.AttributeValueMemberL:
		var sb strings.Builder
		sb.WriteString("[")
		for _, e := range v.Value {
			sb.WriteString(render(e) + ",")
		}
		return sb.String() + "]"
	case *types.AttributeValueMemberS:
		return fmt.Sprintf("S%q", v.Value)
	case *types.AttributeValueMemberN:
		return "N" + v.Value
	case *types.AttributeValueMemberB:
		return fmt.Sprintf("B%x", v.Value)
	case *types.AttributeValueMemberBOOL:
		return fmt.Sprint("BOOL", v.Value)
	case *types.AttributeValueMemberNULL:
		return "NULL"
	}
	return fmt.Sprintf("%T", v)
}

// TestTypedNilClient: every function that takes a client refuses a typed-nil
// one with an error that says what to pass, instead of panicking at its first
// call.
func TestTypedNilClient(t *testing.T) {
	var c *ddb.Client
	ctx := context.Background()
	if s, err := New(c, Config{}); !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), "*dynamodb.Client") {
		t.Fatalf("New: store %v, err %v; want ErrInvalidConfig naming *dynamodb.Client", s, err)
	}
	if err := CreateTable(ctx, c, TableSpec{}); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Fatalf("CreateTable: %v", err)
	}
	s := mustStore(t, Config{ClockSkew: NoClockSkew})
	r := consumer.ExecuteIdempotently(ctx, s, "k", nil, func(ctx context.Context) (int, error) {
		if _, err := Apply(ctx, c, &ddb.UpdateItemInput{UpdateExpression: aws.String("SET a = :a")}); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Errorf("Apply: %v", err)
		}
		if _, err := ApplyPut(ctx, c, &ddb.PutItemInput{Item: map[string]types.AttributeValue{"id": strAV("x")}}, []string{"id"}); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Errorf("ApplyPut: %v", err)
		}
		return 1, nil
	})
	if r.Outcome != consumer.Success {
		t.Fatalf("%v %v", r.Outcome, r.Err)
	}
}

// TestMissingTable: a store on a table that does not exist says so, naming the
// table and CreateTable, from Check and from every call; the calls answer a
// store outage, which no delivery counts as an attempt.
func TestMissingTable(t *testing.T) {
	ctx := context.Background()
	s, err := New(client(t), Config{Table: missingTable}, consumer.WithPrefix(prefix(t)), consumer.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Check(ctx)
	var se *consumer.StoreError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), `table "`+missingTable+`"`) || !strings.Contains(err.Error(), "dynamodb.CreateTable") {
		t.Fatalf("Check: %v; want a store outage naming the table and CreateTable", err)
	}
	runs := 0
	for i := 0; i < 3; i++ {
		r := consumer.ExecuteIdempotently(ctx, s, "k", nil, func(ctx context.Context) (int, error) { runs++; return 1, nil })
		if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrStoreUnavailable) || errors.Is(r.Err, consumer.ErrAttemptsExhausted) ||
			!strings.Contains(r.Err.Error(), missingTable) || r.Action() != consumer.Retry || r.Attempt != 0 {
			t.Fatalf("delivery %d: %v %v attempt %d action %v", i+1, r.Outcome, r.Err, r.Attempt, r.Action())
		}
	}
	if runs != 0 {
		t.Fatalf("the handler ran %d times on a missing table", runs)
	}
	if err := mustStore(t, Config{}).Check(ctx); err != nil {
		t.Fatalf("Check of the test table: %v", err)
	}
	if err := (*Store)(nil).Check(ctx); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Fatalf("Check of a nil store: %v", err)
	}
}

// TestCheckTableWithAnotherKey: Check tells a table whose key is not the
// records table's from a missing one, as a configuration to change.
func TestCheckTableWithAnotherKey(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	name := "idemkit_other_key_" + strings.ReplaceAll(prefix(t)[len(prefix(t))-8:], ":", "")
	if _, err := c.CreateTable(ctx, &ddb.CreateTableInput{TableName: aws.String(name), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.DeleteTable(context.Background(), &ddb.DeleteTableInput{TableName: aws.String(name)}) })
	if err := ddb.NewTableExistsWaiter(c, func(o *ddb.TableExistsWaiterOptions) { o.MinDelay = 100 * time.Millisecond }).Wait(ctx, &ddb.DescribeTableInput{TableName: aws.String(name)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	s, err := New(c, Config{Table: name})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), name) ||
		!strings.Contains(err.Error(), `partition key "pk"`) {
		t.Fatalf("Check: %v; want ErrInvalidConfig naming the table and its key", err)
	}
}
