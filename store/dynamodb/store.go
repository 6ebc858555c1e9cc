package dynamodb

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/consumer"
)

// The record keeps consumer.HistoryLen errors in h0..h3: this fails to compile if
// that number changes.
var _ = [1]struct{}{}[consumer.HistoryLen-4]

// Store keeps idempotency records in a DynamoDB table. It is safe for
// concurrent use. Make it with New.
type Store struct {
	c     Client
	s     consumer.Settings
	cfg   Config
	table *string
	skew  int64 // ms

	// offset shifts this store's clock, for tests of workers whose clocks
	// disagree; always 0 otherwise.
	offset atomic.Int64
}

var _ consumer.Store = (*Store)(nil)

// New returns a Store on client's table cfg.Table. It checks the client, the
// options and the configuration (ErrInvalidConfig says what to change) and
// resolves the result limit (see MaxResult); it makes no call to DynamoDB. Call
// Check at start-up or from a readiness probe to know that the table is there:
// until it is, every call fails as a store outage whose error names the table
// and CreateTable.
func New(client Client, cfg Config, opts ...consumer.Option) (*Store, error) {
	if nilClient(client) {
		return nil, errNilClient
	}
	s, err := consumer.NewSettings(opts...)
	if err != nil {
		return nil, err
	}
	if s.MaxResultSize, err = resultLimit(s, opts); err != nil {
		return nil, err
	}
	if err := checkKeyRoom(s); err != nil {
		return nil, err
	}
	given := cfg
	cfg = cfg.withDefaults()
	if err := cfg.validate(given); err != nil {
		return nil, err
	}
	return &Store{c: client, s: s, cfg: cfg, table: aws.String(cfg.Table), skew: cfg.ClockSkew.Milliseconds()}, nil
}

// Settings returns the store's resolved options (zero Settings on a nil store,
// which ExecuteIdempotently and ExecuteBatch refuse with ErrInvalidConfig).
func (st *Store) Settings() consumer.Settings {
	if st == nil {
		return consumer.Settings{}
	}
	return st.s
}

// Config returns the store's configuration, defaults filled in.
func (st *Store) Config() Config {
	if st == nil {
		return Config{}
	}
	return st.cfg
}

// RecordKey returns the partition key of key's record: the prefix, the scope
// in braces, then the key. ClaimReply.Ref is this value.
func (st *Store) RecordKey(key consumer.Key) string {
	return st.s.Prefix + ":{" + st.s.Scope + "}" + string(key)
}

func (st *Store) ref(ref string, key consumer.Key) string {
	if ref != "" {
		return ref
	}
	return st.RecordKey(key)
}

// nowMs is this store's clock, unix ms.
func (st *Store) nowMs() int64 { return time.Now().UnixMilli() + st.offset.Load() }

func keyOf(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: &types.AttributeValueMemberS{Value: pk}}
}

// bound limits ctx to the call timeout, unless its own deadline is as tight.
func (st *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= st.s.CallTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, st.s.CallTimeout)
}

// read is a strongly consistent read of the item at pk; nil when there is none.
func (st *Store) read(ctx context.Context, pk string) (map[string]types.AttributeValue, error) {
	out, err := st.c.GetItem(ctx, &ddb.GetItemInput{TableName: st.table, Key: keyOf(pk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}

// update sends one conditional UpdateItem. It reports whether the condition
// held; when it did not, old is the item the condition was checked against if
// the server sent it back (DynamoDB does, on request), else nil.
func (st *Store) update(ctx context.Context, in *ddb.UpdateItemInput) (out *ddb.UpdateItemOutput, ok bool, old map[string]types.AttributeValue, err error) {
	in.TableName = st.table
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err = st.c.UpdateItem(ctx, in)
	if err == nil {
		return out, true, nil, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if len(ccf.Item) > 0 {
			old = ccf.Item
		}
		return nil, false, old, nil
	}
	return nil, false, nil, err
}

// put sends one conditional PutItem, reporting as update does.
func (st *Store) put(ctx context.Context, item map[string]types.AttributeValue, cond string, vals map[string]types.AttributeValue) (bool, map[string]types.AttributeValue, error) {
	_, err := st.c.PutItem(ctx, &ddb.PutItemInput{
		TableName: st.table, Item: item, ConditionExpression: aws.String(cond), ExpressionAttributeValues: vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return true, nil, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if len(ccf.Item) > 0 {
			return false, ccf.Item, nil
		}
		return false, nil, nil
	}
	return false, nil, err
}

// current is the item a failed condition was checked against: old when the
// server sent it, else a consistent read. nil: no item.
func (st *Store) current(ctx context.Context, pk string, old map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	if old != nil {
		return old, nil
	}
	return st.read(ctx, pk)
}

// each runs do(i) for i in [0, n): items with the same key one after another in
// input order, at most cfg.Concurrency at once. It returns when all are done.
func (st *Store) each(n int, key func(i int) consumer.Key, do func(i int)) {
	if n == 1 || st.cfg.Concurrency == 1 {
		for i := 0; i < n; i++ {
			do(i)
		}
		return
	}
	// Group the items by key, the groups in order of their first item.
	groups := make([][]int, 0, n)
	seen := make(map[consumer.Key]int, n)
	for i := 0; i < n; i++ {
		k := key(i)
		if g, ok := seen[k]; ok {
			groups[g] = append(groups[g], i)
			continue
		}
		seen[k] = len(groups)
		groups = append(groups, []int{i})
	}
	workers := min(st.cfg.Concurrency, len(groups))
	var next atomic.Int64
	var wg sync.WaitGroup
	wg.Add(workers)
	for w := 0; w < workers; w++ {
		go func() {
			defer wg.Done()
			for {
				g := int(next.Add(1)) - 1
				if g >= len(groups) {
					return
				}
				for _, i := range groups[g] {
					do(i)
				}
			}
		}()
	}
	wg.Wait()
}

// storeErr wraps a failed call as a store outage, saying what to do when the
// table is missing.
func (st *Store) storeErr(op string, err error) error {
	return &consumer.StoreError{Op: op, Err: st.explain(err)}
}

// errNilStore answers every call on a nil *Store.
var errNilStore = configError("nil store: make it with New and check its error")
