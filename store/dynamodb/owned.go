package dynamodb

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/consumer"
)

// Extend renews the leases of running attempts: one UpdateItem per item,
// conditioned on the record being the caller's started claim. The new lease
// runs from this worker's clock.
func (st *Store) Extend(ctx context.Context, items []consumer.Owned) []error {
	return st.ownedCall(ctx, "extend", items)
}

// Release gives claims back without a result: the record becomes retry and the
// abandoned attempt is not counted. A release that finds the record released at
// its fence (sent again after a lost reply) answers OK.
func (st *Store) Release(ctx context.Context, items []consumer.Owned) []error {
	return st.ownedCall(ctx, "release", items)
}

func (st *Store) ownedCall(ctx context.Context, op string, items []consumer.Owned) []error {
	out := make([]error, len(items))
	if st == nil {
		for i := range out {
			out[i] = errNilStore
		}
		return out
	}
	ctx, cancel := st.bound(ctx)
	defer cancel()
	st.each(len(items), func(i int) consumer.Key { return items[i].Key }, func(i int) {
		out[i] = st.ownedOne(ctx, op, &items[i])
	})
	return out
}

func (st *Store) ownedOne(ctx context.Context, op string, o *consumer.Owned) error {
	pk := st.ref(o.Ref, o.Key)
	now := st.nowMs()
	vals := map[string]types.AttributeValue{":st": avStart, ":own": strAV(o.Owner), ":now": numAV(now / 1000)}
	var expr string
	if op == "extend" {
		vals[":lease"] = numAV(now + st.s.Lease.Milliseconds())
		vals[":exp"] = numAV(ceilSec(now + (st.s.Lease + st.s.Retention).Milliseconds()))
		expr = "SET lease = :lease, expires = :exp"
	} else {
		vals[":retry"], vals[":one"] = avRetry, avOne
		vals[":exp"] = numAV(ceilSec(now + st.s.Retention.Milliseconds()))
		expr = "SET st = :retry, attempts = attempts - :one, updated = :now, expires = :exp REMOVE own, lease, locked, cnt"
	}
	_, ok, old, err := st.update(ctx, &ddb.UpdateItemInput{
		Key:                       keyOf(pk),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String("st = :st AND own = :own AND expires > :now"),
		ExpressionAttributeValues: vals,
	})
	switch {
	case err != nil:
		return st.storeErr(op, err)
	case ok:
		return nil
	case op == "release" && o.Fence != 0:
		m, err := st.current(ctx, pk, old)
		if err != nil {
			return st.storeErr(op, err)
		}
		if m != nil {
			if it, derr := decode(m); derr == nil && it.live(st.nowMs()) && it.state == stateRetry && it.fence == o.Fence {
				return nil // sent again after a lost reply: already released
			}
		}
	}
	return lost(op, o.Key, o.Fence)
}

// Peek reads one record (a strongly consistent read) without changing it. A
// record past its expiry reads as not found, whether or not DynamoDB has
// deleted it yet.
func (st *Store) Peek(ctx context.Context, key consumer.Key) (consumer.Record, error) {
	if st == nil {
		return consumer.Record{}, errNilStore
	}
	if err := key.Validate(); err != nil {
		return consumer.Record{}, err
	}
	ctx, cancel := st.bound(ctx)
	defer cancel()
	m, err := st.read(ctx, st.RecordKey(key))
	if err != nil {
		return consumer.Record{}, st.storeErr("peek", err)
	}
	now := st.nowMs()
	rec := consumer.Record{Key: key, Now: time.UnixMilli(now)}
	if m == nil {
		return rec, nil
	}
	it, err := decode(m)
	if err != nil {
		return rec, &consumer.CorruptRecordError{Key: key, Reason: err.Error()}
	}
	if !it.live(now) {
		return rec, nil
	}
	return it.record(key, now, st.s.Retention), nil
}

// record is the live item it as Peek answers it, read at now (unix ms).
func (it *item) record(key consumer.Key, now int64, retention time.Duration) consumer.Record {
	rec := consumer.Record{Key: key, Now: time.UnixMilli(now)}
	rec.Found, rec.State, rec.Owner, rec.Fence, rec.Attempts = true, it.state, it.owner, it.fence, it.attempts
	rec.Fingerprint, rec.Dropped = it.fp, it.dropped
	if it.state == stateDone && it.dropped == "" {
		rec.Result = it.result
	}
	rec.Error, rec.History = it.lastError(), it.history
	rec.Permanent, rec.Locked = it.state == stateFailed && it.permanent, it.locked
	rec.Counted = it.state == stateStarted && it.counted
	rec.Created, rec.Updated = time.Unix(it.created, 0), time.Unix(it.updated, 0)
	rec.TTL = time.Duration(it.expires*1000-now) * time.Millisecond
	if it.state == stateStarted {
		rec.LeaseUntil = time.UnixMilli(it.lease)
		rec.Retention = retention
	}
	return rec
}
