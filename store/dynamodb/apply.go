package dynamodb

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"unicode"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/consumer"
)

// Defaults of the apply options.
const (
	DefaultMarksAttribute = "idemkit_applied"
	DefaultMarks          = 32
)

// ErrNotInHandler: Apply or ApplyPut was called with a context that is not an
// idemkit handler's, so there is no key to mark the item with.
var ErrNotInHandler = errors.New("dynamodb: not in a handler: call Apply with the context ExecuteIdempotently or ExecuteBatch gave the handler")

// ItemAPI is what Apply and ApplyPut need of a DynamoDB client; *dynamodb.Client has it.
type ItemAPI interface {
	GetItem(ctx context.Context, in *ddb.GetItemInput, opts ...func(*ddb.Options)) (*ddb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *ddb.UpdateItemInput, opts ...func(*ddb.Options)) (*ddb.UpdateItemOutput, error)
	PutItem(ctx context.Context, in *ddb.PutItemInput, opts ...func(*ddb.Options)) (*ddb.PutItemOutput, error)
}

var _ ItemAPI = (*ddb.Client)(nil)

// ApplyOption configures Apply and ApplyPut. Every option states its default.
type ApplyOption interface{ applyTo(*applyConfig) }

type applyConfig struct {
	attr  string
	marks int
}

type applyOptFunc func(*applyConfig)

func (f applyOptFunc) applyTo(c *applyConfig) { f(c) }

// WithMarksAttribute names the list attribute in which an item keeps the marks
// of the keys applied to it. Every writer of the item must keep it (write the
// item through Apply or ApplyPut, or leave the attribute alone). Default
// "idemkit_applied".
func WithMarksAttribute(name string) ApplyOption {
	return applyOptFunc(func(c *applyConfig) { c.attr = name })
}

// WithMarks sets how many marks an item keeps at least: the newest n to 3n/2
// (older ones are cut in batches, by a conditional write after every n/2
// applications). A re-run is refused while its key's mark is kept, so n must
// exceed the number of keys applied to one item between a crash and the
// redelivery that finds it (about the lease plus the broker's redelivery delay).
// Each mark costs 19 bytes of the item. Default 32.
func WithMarks(n int) ApplyOption { return applyOptFunc(func(c *applyConfig) { c.marks = n }) }

func newApplyConfig(opts []ApplyOption) (applyConfig, error) {
	c := applyConfig{attr: DefaultMarksAttribute, marks: DefaultMarks}
	for _, o := range opts {
		if o == nil {
			return c, configError("nil ApplyOption")
		}
		o.applyTo(&c)
	}
	switch {
	case c.attr == "" || len(c.attr) > 255:
		return c, configError("WithMarksAttribute(%q): give a name of 1 to 255 bytes", c.attr)
	case c.marks < 1 || c.marks > 10000:
		return c, configError("WithMarks(%d): give 1 to 10000", c.marks)
	}
	return c, nil
}

// mark is the 16-byte mark of the handler's key: SHA-256 of its scope and key,
// length-prefixed.
func mark(ctx context.Context) ([]byte, error) {
	info, ok := consumer.InfoFromContext(ctx)
	if !ok {
		return nil, ErrNotInHandler
	}
	h := sha256.New()
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(info.Scope)))
	h.Write(n[:])
	h.Write([]byte(info.Scope))
	h.Write([]byte(info.Key))
	return h.Sum(nil)[:16], nil
}

// Placeholders Apply adds to the caller's expressions.
const (
	phAttr  = "#idemkit_marks"
	phMark  = ":idemkit_mark"
	phList  = ":idemkit_list"
	phEmpty = ":idemkit_empty"
	phFirst = ":idemkit_first"
	phLast  = ":idemkit_last"
)

// Apply runs in's UpdateItem as the handler's effect, exactly once per key: the
// same conditional write adds the key's mark to the item's list of applied keys
// and is refused if the mark is there already. A handler run again after a
// crash that came after this write and before idemkit recorded the completion
// (the claim taken over after its lease ran out) finds its mark: Apply then
// returns consumer.ErrAlreadyApplied (via consumer.AlreadyApplied) and the
// item's current attributes, without writing. Return that error from the
// handler, with the result you derive from the item: idemkit stores the result
// and reports DUPLICATE.
//
// in is not modified. Its UpdateExpression and ConditionExpression are kept and
// extended (an expression must not use the placeholders #idemkit_marks and
// :idemkit_*). When in asks for no return values, the write asks for
// UPDATED_NEW (to count the marks) and the output's Attributes is nil. A
// refused condition of the caller's own comes back as the client's
// ConditionalCheckFailedException.
//
// ctx must be the handler's context. Apply costs one write, plus one read when
// a condition is refused (none on DynamoDB, which sends the item back with the
// refusal), plus a write now and then to cut old marks (WithMarks).
func Apply(ctx context.Context, client ItemAPI, in *ddb.UpdateItemInput, opts ...ApplyOption) (*ddb.UpdateItemOutput, error) {
	cfg, err := newApplyConfig(opts)
	if err != nil {
		return nil, err
	}
	if nilClient(client) {
		return nil, errNilClient
	}
	if in == nil || in.UpdateExpression == nil {
		return nil, configError("Apply needs an UpdateItemInput with an UpdateExpression")
	}
	m, err := mark(ctx)
	if err != nil {
		return nil, err
	}
	cp := *in
	if cp.ExpressionAttributeNames, err = withPlaceholders(in.ExpressionAttributeNames, map[string]string{phAttr: cfg.attr}); err != nil {
		return nil, err
	}
	if cp.ExpressionAttributeValues, err = withPlaceholders(in.ExpressionAttributeValues, map[string]types.AttributeValue{
		phMark: &types.AttributeValueMemberB{Value: m}, phEmpty: &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
		phList: &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberB{Value: m}}},
	}); err != nil {
		return nil, err
	}
	cp.UpdateExpression = aws.String(addSet(*in.UpdateExpression,
		phAttr+" = list_append(if_not_exists("+phAttr+", "+phEmpty+"), "+phList+")"))
	cp.ConditionExpression = aws.String(and(in.ConditionExpression, "NOT contains("+phAttr+", "+phMark+")"))
	none := cp.ReturnValues == "" || cp.ReturnValues == types.ReturnValueNone
	if none {
		cp.ReturnValues = types.ReturnValueUpdatedNew
	}
	if cp.ReturnValuesOnConditionCheckFailure == "" {
		cp.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	}
	out, err := client.UpdateItem(ctx, &cp)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		item := ccf.Item
		if len(item) == 0 {
			got, rerr := client.GetItem(ctx, &ddb.GetItemInput{TableName: in.TableName, Key: in.Key, ConsistentRead: aws.Bool(true)})
			if rerr != nil {
				return nil, fmt.Errorf("dynamodb: the write was refused, and reading the item to see why failed: %w", rerr)
			}
			item = got.Item
		}
		if hasMark(item[cfg.attr], m) {
			return &ddb.UpdateItemOutput{Attributes: item}, consumer.AlreadyApplied()
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	// The list now: the new one, or the old one with this mark appended.
	var list []types.AttributeValue
	switch l, _ := out.Attributes[cfg.attr].(*types.AttributeValueMemberL); {
	case cp.ReturnValues == types.ReturnValueAllNew || cp.ReturnValues == types.ReturnValueUpdatedNew:
		if l != nil {
			list = l.Value
		}
	case l != nil:
		list = append(append(list, l.Value...), nil)
	default:
		list = []types.AttributeValue{nil}
	}
	trim(ctx, client, in.TableName, in.Key, cfg, list)
	if none {
		out.Attributes = nil
	}
	return out, nil
}

// trim cuts the oldest marks of a list over 3/2 of cfg.marks down to cfg.marks,
// if its first mark is still the one seen. It is best effort: a failure leaves
// the list longer, for the next write to cut.
func trim(ctx context.Context, client ItemAPI, table *string, key map[string]types.AttributeValue, cfg applyConfig, list []types.AttributeValue) {
	if len(list) <= cfg.marks+max(cfg.marks/2, 1) || list[0] == nil {
		return
	}
	cut := len(list) - cfg.marks
	var b strings.Builder
	b.WriteString("REMOVE ")
	for i := cut - 1; i >= 0; i-- { // highest index first: some servers remove one after another
		b.WriteString(phAttr + "[" + strconv.Itoa(i) + "]")
		if i > 0 {
			b.WriteString(", ")
		}
	}
	_, _ = client.UpdateItem(ctx, &ddb.UpdateItemInput{
		TableName: table, Key: key, UpdateExpression: aws.String(b.String()),
		ConditionExpression:       aws.String(phAttr + "[0] = " + phFirst),
		ExpressionAttributeNames:  map[string]string{phAttr: cfg.attr},
		ExpressionAttributeValues: map[string]types.AttributeValue{phFirst: list[0]},
	})
}

// ApplyPut runs in's PutItem as the handler's effect, exactly once per key, as
// Apply does for an UpdateItem: the item written carries the marks the item had
// plus the key's (the newest WithMarks of them), and the write is conditioned on
// the marks being those read. key names the table's key attributes (the
// partition key, and the sort key if any), which in.Item must hold. It reads
// the item first (a strongly consistent read): if the key's mark is there, it
// returns consumer.ErrAlreadyApplied and the item without writing. A write
// refused because another key's write came between the read and the write is
// tried again.
func ApplyPut(ctx context.Context, client ItemAPI, in *ddb.PutItemInput, key []string, opts ...ApplyOption) (*ddb.PutItemOutput, error) {
	cfg, err := newApplyConfig(opts)
	if err != nil {
		return nil, err
	}
	if nilClient(client) {
		return nil, errNilClient
	}
	if in == nil || len(key) == 0 || len(key) > 2 {
		return nil, configError("ApplyPut needs a PutItemInput and the names of the table's key attributes (one or two)")
	}
	if _, ok := in.Item[cfg.attr]; ok {
		return nil, configError("the item holds %q, the attribute of the marks: leave it to ApplyPut (or name another with WithMarksAttribute)", cfg.attr)
	}
	k := make(map[string]types.AttributeValue, len(key))
	for _, name := range key {
		v, ok := in.Item[name]
		if !ok {
			return nil, configError("the item has no key attribute %q", name)
		}
		k[name] = v
	}
	m, err := mark(ctx)
	if err != nil {
		return nil, err
	}
	for round := 0; round < maxRounds; round++ {
		got, err := client.GetItem(ctx, &ddb.GetItemInput{TableName: in.TableName, Key: k, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, err
		}
		if hasMark(got.Item[cfg.attr], m) {
			return &ddb.PutItemOutput{Attributes: got.Item}, consumer.AlreadyApplied()
		}
		var old []types.AttributeValue
		if l, ok := got.Item[cfg.attr].(*types.AttributeValueMemberL); ok {
			old = l.Value
		}
		marks := append(append([]types.AttributeValue{}, old...), &types.AttributeValueMemberB{Value: m})
		if len(marks) > cfg.marks {
			marks = marks[len(marks)-cfg.marks:]
		}
		cp := *in
		cp.Item = maps.Clone(in.Item)
		cp.Item[cfg.attr] = &types.AttributeValueMemberL{Value: marks}
		if cp.ExpressionAttributeNames, err = withPlaceholders(in.ExpressionAttributeNames, map[string]string{phAttr: cfg.attr}); err != nil {
			return nil, err
		}
		asRead := "attribute_not_exists(" + phAttr + ")"
		vals := map[string]types.AttributeValue{}
		if len(old) > 0 {
			// The marks only grow at the end and shrink at the start: their
			// count and last mark tell one list from another.
			asRead = "size(" + phAttr + ") = " + phList + " AND " + phAttr + "[" + strconv.Itoa(len(old)-1) + "] = " + phLast
			vals[phList] = numAV(int64(len(old)))
			vals[phLast] = old[len(old)-1]
		}
		if cp.ExpressionAttributeValues, err = withPlaceholders(in.ExpressionAttributeValues, vals); err != nil {
			return nil, err
		}
		cp.ConditionExpression = aws.String(and(in.ConditionExpression, asRead))
		out, err := client.PutItem(ctx, &cp)
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return out, err
		}
		// Refused: by the caller's condition, or because the marks changed.
		now, rerr := client.GetItem(ctx, &ddb.GetItemInput{TableName: in.TableName, Key: k, ConsistentRead: aws.Bool(true)})
		if rerr != nil {
			return nil, fmt.Errorf("dynamodb: the write was refused, and reading the item to see why failed: %w", rerr)
		}
		if hasMark(now.Item[cfg.attr], m) {
			return &ddb.PutItemOutput{Attributes: now.Item}, consumer.AlreadyApplied()
		}
		if sameMarks(now.Item[cfg.attr], old) {
			return nil, err // the caller's own condition
		}
	}
	return nil, fmt.Errorf("dynamodb: ApplyPut: %w", errContention)
}

func hasMark(v types.AttributeValue, m []byte) bool {
	l, ok := v.(*types.AttributeValueMemberL)
	if !ok {
		return false
	}
	for _, e := range l.Value {
		if b, ok := e.(*types.AttributeValueMemberB); ok && bytes.Equal(b.Value, m) {
			return true
		}
	}
	return false
}

func sameMarks(v types.AttributeValue, old []types.AttributeValue) bool {
	l, _ := v.(*types.AttributeValueMemberL)
	if l == nil {
		return len(old) == 0
	}
	if len(l.Value) != len(old) {
		return false
	}
	for i := range old {
		a, _ := l.Value[i].(*types.AttributeValueMemberB)
		b, _ := old[i].(*types.AttributeValueMemberB)
		if a == nil || b == nil || !bytes.Equal(a.Value, b.Value) {
			return false
		}
	}
	return true
}

// withPlaceholders is a copy of user's map with add's entries, which must not
// be there already; nil when both are empty (DynamoDB refuses an empty map).
func withPlaceholders[V any](user map[string]V, add map[string]V) (map[string]V, error) {
	if len(user)+len(add) == 0 {
		return nil, nil
	}
	out := make(map[string]V, len(user)+len(add))
	maps.Copy(out, user)
	for k, v := range add {
		if _, ok := user[k]; ok {
			return nil, configError("the expression uses %s, which Apply adds: rename it", k)
		}
		out[k] = v
	}
	return out, nil
}

// and joins a caller's condition (if any) and extra.
func and(user *string, extra string) string {
	if user == nil || strings.TrimSpace(*user) == "" {
		return extra
	}
	return "(" + *user + ") AND " + extra
}

// addSet adds action to the SET clause of an update expression, or a SET
// clause with it. SET is a reserved word, so outside the clause keyword it can
// only appear inside a placeholder (#set, :set), never as a word of its own.
func addSet(expr, action string) string {
	for i := 0; i+3 <= len(expr); i++ {
		if !strings.EqualFold(expr[i:i+3], "SET") {
			continue
		}
		before := i == 0 || unicode.IsSpace(rune(expr[i-1]))
		after := i+3 == len(expr) || unicode.IsSpace(rune(expr[i+3]))
		if before && after {
			return expr[:i+3] + " " + action + "," + expr[i+3:]
		}
	}
	return "SET " + action + " " + expr
}
