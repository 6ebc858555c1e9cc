package dynamodb

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/consumer"
)

// maxRounds bounds how many times one claim reads the item and writes again
// because another worker changed the item in between; each round means that
// worker's transition went through.
const maxRounds = 8

// errContention is a claim that lost maxRounds races in a row.
var errContention = errors.New("dynamodb: the record kept changing between read and write; try again")

// Begin claims records: one conditional write per claim (a PutItem of the
// whole record when the key has none), or, when the key has a record, that
// write refused, the record read, and the transition it allows written
// conditioned on the state, owner, fence and lease read. Claims of different
// keys go in parallel.
func (st *Store) Begin(ctx context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	out := make([]consumer.ClaimReply, len(claims))
	if st == nil {
		for i := range out {
			out[i].Err = errNilStore
		}
		return out
	}
	ctx, cancel := st.bound(ctx)
	defer cancel()
	st.each(len(claims), func(i int) consumer.Key { return claims[i].Key }, func(i int) {
		out[i] = st.claim(ctx, claims[i])
	})
	return out
}

// claim decides one claim.
func (st *Store) claim(ctx context.Context, c consumer.Claim) consumer.ClaimReply {
	pk := st.RecordKey(c.Key)
	for round := 0; round < maxRounds; round++ {
		if err := ctx.Err(); err != nil {
			return consumer.ClaimReply{Err: st.storeErr("begin", err)}
		}
		rep, done, err := st.claimRound(ctx, c, pk)
		if err != nil {
			return consumer.ClaimReply{Err: st.storeErr("begin", err)}
		}
		if done {
			return rep
		}
	}
	return consumer.ClaimReply{Err: st.storeErr("begin", errContention)}
}

// claimRound tries the fresh claim, then the transition the record found
// allows. done is false when the record changed under it: go again.
func (st *Store) claimRound(ctx context.Context, c consumer.Claim, pk string) (rep consumer.ClaimReply, done bool, err error) {
	now := st.nowMs()
	acquired := func(fence int64) (consumer.ClaimReply, bool, error) {
		return consumer.ClaimReply{Status: consumer.StatusAcquired, Fence: fence, Attempts: 1, Lease: st.s.Lease,
			Created: time.Unix(now/1000, 0), Fingerprint: c.Fingerprint, Ref: pk}, true, nil
	}
	// A key without a record: the whole record is written in one PutItem.
	ok, old, err := st.put(ctx, st.newRecord(c, pk, now), "attribute_not_exists(pk)", nil)
	if err != nil {
		return rep, false, err
	}
	if ok {
		return acquired(1)
	}
	m, err := st.current(ctx, pk, old)
	if err != nil {
		return rep, false, err
	}
	if m == nil {
		return rep, false, nil // deleted meanwhile: claim afresh
	}
	it, derr := decode(m)
	if derr != nil {
		return consumer.ClaimReply{Err: &consumer.CorruptRecordError{Key: c.Key, Reason: derr.Error()}}, true, nil
	}
	now = st.nowMs()
	if !it.live(now) {
		// Expired, not yet deleted: claimed afresh, its fence going on rising.
		out, ok, _, err := st.fresh(ctx, c, pk, now, nil)
		if err != nil || !ok {
			return rep, false, err
		}
		fence, ferr := numAttr(out.Attributes, "fence")
		if ferr != nil {
			return consumer.ClaimReply{Err: &consumer.CorruptRecordError{Key: c.Key, Reason: ferr.Error()}}, true, nil
		}
		return acquired(fence)
	}
	return st.transition(ctx, c, pk, it, now)
}

// newRecord is the started record of a key's first claim.
func (st *Store) newRecord(c consumer.Claim, pk string, now int64) map[string]types.AttributeValue {
	sec := numAV(now / 1000)
	m := map[string]types.AttributeValue{
		attrPK: strAV(pk), "st": avStart, "own": strAV(c.Owner), "fence": avOne, "attempts": avOne,
		"lease": numAV(now + st.s.Lease.Milliseconds()), "created": sec, "updated": sec,
		attrExpires: numAV(ceilSec(now + (st.s.Lease + st.s.Retention).Milliseconds())),
	}
	if !c.Fingerprint.IsZero() {
		m["fp"] = &types.AttributeValueMemberB{Value: append([]byte(nil), c.Fingerprint[:]...)}
	}
	if c.Locked {
		m["locked"] = avTrue
	}
	if c.Start {
		m["cnt"] = avTrue
	}
	return m
}

// fresh claims a key afresh, its fence going on rising from the old one: a key
// whose record has expired (or has none) when forgot is nil, else the live
// forgotten record forgot, whose operator notes stay.
func (st *Store) fresh(ctx context.Context, c consumer.Claim, pk string, now int64, forgot *item) (*ddb.UpdateItemOutput, bool, map[string]types.AttributeValue, error) {
	vals := map[string]types.AttributeValue{
		":st": avStart, ":own": strAV(c.Owner), ":zero": avZero, ":one": avOne,
		":lease": numAV(now + st.s.Lease.Milliseconds()), ":now": numAV(now / 1000),
		":exp": numAV(ceilSec(now + (st.s.Lease + st.s.Retention).Milliseconds())),
	}
	set := "SET st = :st, own = :own, fence = if_not_exists(fence, :zero) + :one, attempts = :one, lease = :lease, created = :now, updated = :now, expires = :exp"
	remove := " REMOVE res, dropped, perm, " + dropHistory
	cond := "attribute_not_exists(pk) OR expires <= :now"
	if forgot != nil {
		cond = "st = :forgot AND fence = :f AND expires > :now"
		vals[":forgot"], vals[":f"] = avForgot, numAV(forgot.fence)
	} else {
		remove += ", notes"
	}
	if c.Fingerprint.IsZero() {
		remove += ", fp"
	} else {
		set += ", fp = :fp"
		vals[":fp"] = &types.AttributeValueMemberB{Value: append([]byte(nil), c.Fingerprint[:]...)}
	}
	if c.Locked {
		set += ", locked = :true"
		vals[":true"] = avTrue
	} else {
		remove += ", locked"
	}
	if c.Start {
		set += ", cnt = :true"
		vals[":true"] = avTrue
	} else {
		remove += ", cnt"
	}
	out, ok, old, err := st.update(ctx, &ddb.UpdateItemInput{
		Key:                       keyOf(pk),
		UpdateExpression:          aws.String(set + remove),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeValues: vals,
		ReturnValues:              types.ReturnValueUpdatedNew,
	})
	return out, ok, old, err
}

// transition answers a claim on the live record it, writing the change the
// record allows conditioned on what was read.
func (st *Store) transition(ctx context.Context, c consumer.Claim, pk string, it *item, now int64) (consumer.ClaimReply, bool, error) {
	rep := consumer.ClaimReply{Fence: it.fence, Attempts: it.attempts, Created: time.Unix(it.created, 0), Ref: pk}
	last := it.attempts >= st.s.MaxAttempts
	switch {
	case !c.Fingerprint.IsZero() && !it.fp.IsZero() && it.fp != c.Fingerprint:
		rep.Status = consumer.StatusConflict
		return rep, true, nil
	case it.state == stateForgot: // an operator removed it: claimed afresh, its fence going on rising
		_, ok, _, err := st.fresh(ctx, c, pk, now, it)
		if !ok || err != nil {
			return rep, false, err
		}
		return consumer.ClaimReply{Status: consumer.StatusAcquired, Fence: it.fence + 1, Attempts: 1, Lease: st.s.Lease,
			Created: time.Unix(now/1000, 0), Fingerprint: c.Fingerprint, Ref: pk}, true, nil
	case it.state == stateDone:
		rep.Status, rep.Result, rep.Dropped = consumer.StatusCompleted, it.result, it.dropped
		return rep, true, nil
	case it.state == stateFailed:
		rep.Status, rep.Message, rep.Permanent = consumer.StatusFailed, it.lastError(), it.permanent
		return rep, true, nil
	case it.state == stateRetry && last:
		ok, err := st.exhaust(ctx, pk, it, now, "", false)
		if !ok || err != nil {
			return rep, false, err
		}
		rep.Status, rep.Message = consumer.StatusExhausted, it.lastError()
		return rep, true, nil
	case it.state == stateRetry:
		ok, err := st.take(ctx, c, pk, it, now, false)
		if !ok || err != nil {
			return rep, false, err
		}
		st.claimed(&rep, c, it, true)
		rep.Status = consumer.StatusAcquired
		return rep, true, nil
	case it.owner == c.Owner: // the caller's own claim, asked again
		if c.Start && !it.counted { // its handler starts now: the claim becomes an attempt
			ok, err := st.count(ctx, pk, it, now)
			if !ok || err != nil {
				return rep, false, err
			}
		}
		rep.Status, rep.Lease = consumer.StatusAcquired, time.Duration(max(it.lease-now, 0))*time.Millisecond
		rep.Fingerprint = it.fp
		return rep, true, nil
	case it.lease+st.skew > now && !(c.Locked && it.locked): // live
		rep.Status, rep.Lease = consumer.StatusInProgress, time.Duration(it.lease+st.skew-now)*time.Millisecond
		return rep, true, nil
	case it.counted && last: // expired (or its lock holder is gone) on the last attempt
		msg := "lease expired during the last allowed attempt"
		ok, err := st.exhaust(ctx, pk, it, now, msg, c.Locked)
		if !ok || err != nil {
			return rep, false, err
		}
		rep.Status, rep.Message = consumer.StatusExhausted, msg
		return rep, true, nil
	default: // expired, or claimed under the lock the caller now holds: take over
		// A claim that never became an attempt is taken over without a charge.
		ok, err := st.take(ctx, c, pk, it, now, true)
		if !ok || err != nil {
			return rep, false, err
		}
		st.claimed(&rep, c, it, it.counted)
		rep.Status = consumer.StatusTakenOver
		return rep, true, nil
	}
}

// claimed fills rep for a claim that took the record it over; charge says the
// claim is the next attempt.
func (st *Store) claimed(rep *consumer.ClaimReply, c consumer.Claim, it *item, charge bool) {
	rep.Fence, rep.Attempts, rep.Lease = it.fence+1, it.attempts, st.s.Lease
	if charge {
		rep.Attempts++
	}
	rep.Fingerprint = it.fp
	if it.fp.IsZero() {
		rep.Fingerprint = c.Fingerprint
	}
}

// startedAsRead is the condition that a started record is still the claim
// read: its owner, fence and counted flag (which its owner may set meanwhile),
// not expired, and (for a takeover) its lease run out on this worker's clock
// less the skew allowance, or claimed under the lock the caller holds.
func startedAsRead(vals map[string]types.AttributeValue, it *item, now, skew int64, locked bool) string {
	vals[":st"], vals[":old"], vals[":f"], vals[":now"] = avStart, strAV(it.owner), numAV(it.fence), numAV(now/1000)
	vals[":cut"], vals[":true"] = numAV(now-skew), avTrue
	cond := "st = :st AND own = :old AND fence = :f AND expires > :now AND "
	if it.counted {
		cond += "cnt = :true AND (lease <= :cut"
	} else {
		cond += "(attribute_not_exists(cnt) OR cnt <> :true) AND (lease <= :cut"
	}
	if locked {
		cond += " OR locked = :true"
	}
	return cond + ")"
}

// count marks the caller's own started claim it an attempt: its handler starts
// now. It reports whether the record was still as read.
func (st *Store) count(ctx context.Context, pk string, it *item, now int64) (bool, error) {
	_, ok, _, err := st.update(ctx, &ddb.UpdateItemInput{
		Key:                 keyOf(pk),
		UpdateExpression:    aws.String("SET cnt = :true, updated = :up"),
		ConditionExpression: aws.String("st = :st AND own = :own AND fence = :f AND expires > :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":true": avTrue, ":up": numAV(now / 1000), ":st": avStart, ":own": strAV(it.owner),
			":f": numAV(it.fence), ":now": numAV(now / 1000),
		},
	})
	return ok, err
}

// take claims the live record it: a retry record (retry) or a started one whose
// lease ran out or whose lock holder is gone (takeover). The claim is the next
// attempt, unless it takes over a claim that never became one: that keeps its
// attempt number. It reports whether the record was still as read.
func (st *Store) take(ctx context.Context, c consumer.Claim, pk string, it *item, now int64, takeover bool) (bool, error) {
	attempts := int64(it.attempts)
	if !takeover || it.counted {
		attempts++
	}
	vals := map[string]types.AttributeValue{
		":own": strAV(c.Owner), ":f1": numAV(it.fence + 1), ":a1": numAV(attempts),
		":lease": numAV(now + st.s.Lease.Milliseconds()), ":up": numAV(now / 1000),
		":exp": numAV(ceilSec(now + (st.s.Lease + st.s.Retention).Milliseconds())),
	}
	set := "SET own = :own, fence = :f1, attempts = :a1, lease = :lease, updated = :up, expires = :exp"
	var cond string
	if takeover {
		cond = startedAsRead(vals, it, now, st.skew, c.Locked)
	} else {
		vals[":st"], vals[":retry"], vals[":f"], vals[":now"] = avStart, avRetry, numAV(it.fence), numAV(now/1000)
		set += ", st = :st"
		cond = "st = :retry AND fence = :f AND expires > :now"
	}
	var remove []string
	if c.Locked {
		set += ", locked = :true"
		vals[":true"] = avTrue
	} else {
		remove = append(remove, "locked")
	}
	if c.Start {
		set += ", cnt = :true"
		vals[":true"] = avTrue
	} else {
		remove = append(remove, "cnt")
	}
	if it.fp.IsZero() && !c.Fingerprint.IsZero() {
		set += ", fp = :fp"
		vals[":fp"] = &types.AttributeValueMemberB{Value: append([]byte(nil), c.Fingerprint[:]...)}
	}
	_, ok, _, err := st.update(ctx, &ddb.UpdateItemInput{
		Key:                       keyOf(pk),
		UpdateExpression:          aws.String(set + removing(remove)),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeValues: vals,
	})
	return ok, err
}

// removing is the REMOVE clause of names, "" for none.
func removing(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return " REMOVE " + strings.Join(names, ", ")
}

// exhaust fails the live record it for good: its attempts are used up. msg,
// when set, is pushed onto its error history. It reports whether the record was
// still as read. locked says the caller holds the key's lock.
func (st *Store) exhaust(ctx context.Context, pk string, it *item, now int64, msg string, locked bool) (bool, error) {
	vals := map[string]types.AttributeValue{
		":failed": avFail, ":up": numAV(now / 1000), ":exp": numAV(ceilSec(now + st.s.Retention.Milliseconds())),
	}
	set := "SET st = :failed, updated = :up, expires = :exp"
	var cond string
	if it.state == stateRetry {
		vals[":retry"], vals[":f"], vals[":now"] = avRetry, numAV(it.fence), numAV(now/1000)
		cond = "st = :retry AND fence = :f AND expires > :now"
	} else {
		cond = startedAsRead(vals, it, now, st.skew, locked)
	}
	if msg != "" {
		errorValues(vals, now/1000, msg)
		set += ", " + pushError
	}
	_, ok, _, err := st.update(ctx, &ddb.UpdateItemInput{
		Key:                       keyOf(pk),
		UpdateExpression:          aws.String(set + " REMOVE own, lease, locked, cnt, perm"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeValues: vals,
	})
	return ok, err
}

// numAttr reads an integer attribute of an UpdateItem reply.
func numAttr(m map[string]types.AttributeValue, name string) (int64, error) {
	v, ok := m[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, errors.New("the reply has no " + name)
	}
	return strconv.ParseInt(v.Value, 10, 64)
}
