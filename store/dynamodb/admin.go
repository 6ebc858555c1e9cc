package dynamodb

import (
	"context"
	"encoding/base64"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
)

// The operator's side of Store (admin.Store), with the Redis and memory
// stores' semantics: scans, batched reads and operator transitions.

var _ admin.Store = (*Store)(nil)

// recordKeyIn is key's partition key in scope.
func (st *Store) recordKeyIn(scope string, key consumer.Key) string {
	return st.s.Prefix + ":{" + scope + "}" + string(key)
}

// checkScope refuses a scope no record can be in.
func checkScope(scope string) error {
	if strings.ContainsAny(scope, "{}") {
		return configError("scope %q contains '{' or '}': no record can be in it", scope)
	}
	return nil
}

// ChangeRecord runs one operator transition (see consumer.OperatorOp): the
// record is read, then the change written conditioned on its state, fence and
// owner as read, and read again when another transition came in between.
func (st *Store) ChangeRecord(ctx context.Context, c consumer.OperatorChange) (consumer.OperatorReply, error) {
	if st == nil {
		return consumer.OperatorReply{}, errNilStore
	}
	if err := c.Key.Validate(); err != nil {
		return consumer.OperatorReply{}, err
	}
	if c.Op < consumer.OpUnstick || c.Op > consumer.OpRerun {
		return consumer.OperatorReply{}, configError("operator op %d: use OpUnstick, OpForget or OpRerun", c.Op)
	}
	if err := checkScope(c.Scope); err != nil {
		return consumer.OperatorReply{}, err
	}
	scope := c.Scope
	if scope == "" {
		scope = st.s.Scope
	}
	pk := st.recordKeyIn(scope, c.Key)
	ctx, cancel := st.bound(ctx)
	defer cancel()
	for round := 0; round < maxRounds; round++ {
		if err := ctx.Err(); err != nil {
			return consumer.OperatorReply{}, st.storeErr(c.Op.String(), err)
		}
		rep, done, err := st.changeRound(ctx, c, pk)
		if err != nil || done {
			return rep, err
		}
	}
	return consumer.OperatorReply{}, st.storeErr(c.Op.String(), errContention)
}

// changeRound reads the record and writes the change it allows. done is false
// when the record changed under it: go again.
func (st *Store) changeRound(ctx context.Context, c consumer.OperatorChange, pk string) (rep consumer.OperatorReply, done bool, err error) {
	m, err := st.read(ctx, pk)
	if err != nil {
		return rep, false, st.storeErr(c.Op.String(), err)
	}
	now := st.nowMs()
	if m == nil {
		return consumer.OperatorReply{Status: consumer.ChangeNotFound}, true, nil
	}
	it, derr := decode(m)
	if derr != nil {
		return rep, true, &consumer.CorruptRecordError{Key: c.Key, Reason: derr.Error()}
	}
	if !it.live(now) {
		return consumer.OperatorReply{Status: consumer.ChangeNotFound}, true, nil
	}
	rep = consumer.OperatorReply{State: it.state, Fence: it.fence, NewFence: it.fence}
	if it.state == stateStarted {
		rep.LeaseLeft = time.Duration(max(it.lease-now, 0)) * time.Millisecond
	}
	if c.Fence != 0 && c.Fence != it.fence {
		rep.Status = consumer.ChangeFenceMoved
		return rep, true, nil
	}
	sec := now / 1000
	ret := ceilSec(now + st.s.Retention.Milliseconds())
	vals := map[string]types.AttributeValue{
		":st": strAV(it.state), ":f": numAV(it.fence), ":now": numAV(sec), ":up": numAV(sec),
		":notes": notesAV(sec, c.Note, it.notes),
	}
	cond := "st = :st AND fence = :f AND expires > :now"
	if it.state == stateStarted {
		cond += " AND own = :own"
		vals[":own"] = strAV(it.owner)
	}
	set := "SET notes = :notes, updated = :up, attempts = :a"
	var remove string
	switch {
	case c.Op == consumer.OpUnstick && it.state == stateStarted:
		// The abandoned attempt is not counted; the fence rises, so the old owner
		// loses its claim at its next call.
		set += ", st = :to, fence = :f1, expires = :exp"
		vals[":to"], vals[":f1"], vals[":a"], vals[":exp"] = avRetry, numAV(it.fence+1), numAV(int64(max(it.attempts-1, 0))), numAV(ret)
		remove = " REMOVE own, lease, locked, cnt"
		rep.NewFence = it.fence + 1
	case c.Op == consumer.OpForget && it.state != stateForgot:
		set += ", st = :to, expires = :exp"
		vals[":to"], vals[":a"], vals[":exp"] = avForgot, avZero, numAV(max(it.expires, ret))
		remove = " REMOVE own, lease, locked, cnt, fp, res, dropped, perm"
	case c.Op == consumer.OpRerun && (it.state == stateDone || it.state == stateFailed):
		set += ", st = :to, expires = :exp"
		vals[":to"], vals[":a"], vals[":exp"] = avRetry, avZero, numAV(max(it.expires, ret))
		remove = " REMOVE res, dropped, perm"
		rep.LeaseLeft = 0
	default:
		rep.Status, rep.LeaseLeft = consumer.ChangeWrongState, 0
		return rep, true, nil
	}
	_, ok, _, err := st.update(ctx, &ddb.UpdateItemInput{
		Key:                       keyOf(pk),
		UpdateExpression:          aws.String(set + remove),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeValues: vals,
	})
	if err != nil || !ok {
		return consumer.OperatorReply{}, false, st.storeErrOrNil(c.Op.String(), err)
	}
	rep.Status = consumer.ChangeApplied
	return rep, true, nil
}

// storeErrOrNil is storeErr, nil for no error.
func (st *Store) storeErrOrNil(op string, err error) error {
	if err == nil {
		return nil
	}
	return st.storeErr(op, err)
}

// notesAV is the record's notes with note put first, the newest consumer.NotesLen
// kept, note cut to consumer.MaxNoteText bytes.
func notesAV(sec int64, note string, old []consumer.OperatorNote) types.AttributeValue {
	entry := func(t int64, text string) types.AttributeValue {
		return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"t": numAV(t), "m": strAV(text)}}
	}
	l := make([]types.AttributeValue, 0, min(len(old)+1, consumer.NotesLen))
	l = append(l, entry(sec, strings.ToValidUTF8(consumer.CapText(note, consumer.MaxNoteText), "\uFFFD")))
	for _, n := range old[:min(len(old), consumer.NotesLen-1)] {
		l = append(l, entry(n.Time.Unix(), n.Text))
	}
	return &types.AttributeValueMemberL{Value: l}
}

// PeekRecords reads the records of keys in scope ("" for the store's own)
// without changing them: one strongly consistent read per key, at most
// Config.Concurrency at once. Each answer's Now is this store's clock.
func (st *Store) PeekRecords(ctx context.Context, scope string, keys []consumer.Key) ([]consumer.AdminRecord, error) {
	if st == nil {
		return nil, errNilStore
	}
	if err := checkScope(scope); err != nil {
		return nil, err
	}
	if scope == "" {
		scope = st.s.Scope
	}
	for _, k := range keys {
		if err := k.Validate(); err != nil {
			return nil, err
		}
	}
	ctx, cancel := st.bound(ctx)
	defer cancel()
	out := make([]consumer.AdminRecord, len(keys))
	errs := make([]error, len(keys))
	st.each(len(keys), func(i int) consumer.Key { return keys[i] }, func(i int) {
		m, err := st.read(ctx, st.recordKeyIn(scope, keys[i]))
		out[i], errs[i] = st.adminRecord(scope, keys[i], m), err
	})
	for _, err := range errs {
		if err != nil {
			return nil, st.storeErr("peek", err)
		}
	}
	return out, nil
}

// adminRecord is the item m (nil: none) as an operator sees it.
func (st *Store) adminRecord(scope string, key consumer.Key, m map[string]types.AttributeValue) consumer.AdminRecord {
	now := st.nowMs()
	out := consumer.AdminRecord{Scope: scope, Record: consumer.Record{Key: key, Now: time.UnixMilli(now)}}
	if m == nil {
		return out
	}
	it, err := decode(m)
	if err != nil {
		out.Found, out.Corrupt = true, err.Error()
		return out
	}
	if !it.live(now) {
		return out
	}
	out.Record = it.record(key, now, st.s.Retention)
	out.Notes = it.notes
	return out
}

// scanCursor is the form of a scan's cursor: this prefix, then the partition
// key the step stopped at, base64url.
const scanCursor = "pk."

// ScanRecords runs one step of a scan over the records under the store's
// prefix: a DynamoDB Scan (strongly consistent) of Count items of the table,
// of which those that are records of the prefix (and of q.Scope when set) are
// returned. A scan reads the whole table, items of every prefix and scope:
// DynamoDB has no index on a partition key's beginning. Without a scope, a
// record's scope is read from its key. The cursor is where the step stopped.
func (st *Store) ScanRecords(ctx context.Context, q consumer.ScanQuery) (consumer.ScanPage, error) {
	if st == nil {
		return consumer.ScanPage{}, errNilStore
	}
	if err := checkScope(q.Scope); err != nil {
		return consumer.ScanPage{}, err
	}
	count := q.Count
	if count <= 0 {
		count = consumer.DefaultScanCount
	}
	head := st.s.Prefix + ":{"
	if q.Scope != "" {
		head += q.Scope + "}"
	}
	in := &ddb.ScanInput{
		TableName: st.table, Limit: aws.Int32(int32(min(count, 1<<30))), ConsistentRead: aws.Bool(true),
		FilterExpression:          aws.String("begins_with(pk, :head)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":head": strAV(head)},
	}
	if q.Cursor != "" {
		rest, ok := strings.CutPrefix(q.Cursor, scanCursor)
		pk, err := base64.RawURLEncoding.DecodeString(rest)
		if !ok || err != nil || len(pk) == 0 {
			return consumer.ScanPage{}, configError("scan cursor %q is not one a scan of this store returned", q.Cursor)
		}
		in.ExclusiveStartKey = keyOf(string(pk))
	}
	ctx, cancel := st.bound(ctx)
	defer cancel()
	res, err := st.c.Scan(ctx, in)
	if err != nil {
		return consumer.ScanPage{}, st.storeErr("scan", err)
	}
	page := consumer.ScanPage{Node: st.cfg.Table, Records: make([]consumer.AdminRecord, 0, len(res.Items))}
	if last, ok := res.LastEvaluatedKey[attrPK].(*types.AttributeValueMemberS); ok {
		page.Next = scanCursor + base64.RawURLEncoding.EncodeToString([]byte(last.Value))
	}
	for _, m := range res.Items {
		pk, ok := m[attrPK].(*types.AttributeValueMemberS)
		if !ok {
			continue
		}
		rest, ok := strings.CutPrefix(pk.Value, head)
		if !ok {
			continue
		}
		scope := q.Scope
		if scope == "" {
			if scope, rest, ok = strings.Cut(rest, "}"); !ok {
				continue // under the prefix, not a record key
			}
		}
		key := consumer.Key(rest)
		if key.Validate() != nil {
			continue
		}
		if r := st.adminRecord(scope, key, m); r.Found {
			page.Records = append(page.Records, r)
		}
	}
	return page, nil
}
