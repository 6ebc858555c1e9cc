package dynamodb

import (
	"context"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/consumer"
)

// Settle completes or fails claimed records: one UpdateItem per item,
// conditioned on the record being the caller's started claim, items of
// different keys in parallel. A settlement that finds the record already
// settled at its fence (sent again after a lost reply) answers as the first
// did. A settled record lives for the retention from its settlement.
func (st *Store) Settle(ctx context.Context, items []consumer.Settlement) []consumer.SettleReply {
	out := make([]consumer.SettleReply, len(items))
	if st == nil {
		for i := range out {
			out[i].Err = errNilStore
		}
		return out
	}
	ctx, cancel := st.bound(ctx)
	defer cancel()
	st.each(len(items), func(i int) consumer.Key { return items[i].Key }, func(i int) {
		out[i] = st.settle(ctx, &items[i])
	})
	return out
}

func (st *Store) settle(ctx context.Context, s *consumer.Settlement) consumer.SettleReply {
	pk := st.ref(s.Ref, s.Key)
	op := "fail"
	if s.Complete {
		op = "complete"
	}
	now := st.nowMs()
	if s.Complete && s.Fence != 0 && s.Attempts != 0 && !s.Created.IsZero() {
		// The caller knows its claim: the completed record is written whole, in
		// one PutItem. Refused (the claim is not the caller's, a settlement sent
		// again, or a fingerprint the caller did not pass back): the update below
		// finds out which.
		ok, _, err := st.putCompleted(ctx, s, pk, now)
		if err != nil {
			return consumer.SettleReply{Err: st.storeErr(op, err)}
		}
		if ok {
			return consumer.SettleReply{}
		}
	}
	attempts := s.Attempts
	if s.Fence == 0 || attempts == 0 {
		// The caller does not know its claim: read the attempts, which do not
		// change while the claim is the owner's.
		m, err := st.read(ctx, pk)
		if err != nil {
			return consumer.SettleReply{Err: st.storeErr(op, err)}
		}
		it, derr := st.owned(m, s.Key, s.Owner, now)
		if derr != nil {
			return consumer.SettleReply{Err: derr}
		}
		if it == nil {
			return st.settledAgain(s, m, op)
		}
		attempts = it.attempts
	}
	vals := map[string]types.AttributeValue{
		":st": avStart, ":own": strAV(s.Owner), ":now": numAV(now / 1000),
		":exp": numAV(ceilSec(now + st.s.Retention.Milliseconds())),
	}
	set := "SET st = :to, updated = :now, expires = :exp"
	remove := " REMOVE own, lease, locked, cnt"
	terminal := false
	switch {
	case s.Complete:
		vals[":to"] = avDone
		remove += ", perm, " + dropHistory
		switch {
		case s.Dropped != "":
			set += ", dropped = :dropped"
			vals[":dropped"] = strAV(s.Dropped)
			remove += ", res"
		case len(s.Result) > MaxResult:
			st.s.Logger.Warn("dynamodb: result not kept: over the item size limit", "key", string(s.Key),
				"size", len(s.Result), "limit", MaxResult)
			set += ", dropped = :dropped"
			vals[":dropped"] = strAV(strconv.Itoa(len(s.Result)))
			remove += ", res"
		default:
			set += ", res = :res"
			vals[":res"] = &types.AttributeValueMemberB{Value: append([]byte{}, s.Result...)}
			remove += ", dropped"
		}
	default:
		terminal = s.Permanent || attempts >= st.s.MaxAttempts
		vals[":to"] = avRetry
		if terminal {
			vals[":to"] = avFail
		}
		if s.Permanent {
			set += ", perm = :true"
			vals[":true"] = avTrue
		} else {
			remove += ", perm"
		}
		errorValues(vals, now/1000, s.Message)
		set += ", " + pushError
	}
	_, ok, old, err := st.update(ctx, &ddb.UpdateItemInput{
		Key:                       keyOf(pk),
		UpdateExpression:          aws.String(set + remove),
		ConditionExpression:       aws.String("st = :st AND own = :own AND expires > :now"),
		ExpressionAttributeValues: vals,
	})
	if err != nil {
		return consumer.SettleReply{Err: st.storeErr(op, err)}
	}
	if ok {
		return consumer.SettleReply{Terminal: terminal}
	}
	m, err := st.current(ctx, pk, old)
	if err != nil {
		return consumer.SettleReply{Err: st.storeErr(op, err)}
	}
	return st.settledAgain(s, m, op)
}

// settledAgain answers a settlement that found m (nil: no item) not the
// caller's claim: one sent again after a lost reply finds the record settled at
// its fence and answers as the first did; any other lost its claim.
func (st *Store) settledAgain(s *consumer.Settlement, m map[string]types.AttributeValue, op string) consumer.SettleReply {
	if m != nil && s.Fence != 0 {
		if it, derr := decode(m); derr == nil && it.live(st.nowMs()) && it.fence == s.Fence {
			switch {
			case s.Complete && it.state == stateDone, !s.Complete && it.state == stateRetry:
				return consumer.SettleReply{}
			case !s.Complete && it.state == stateFailed:
				return consumer.SettleReply{Terminal: true}
			}
		}
	}
	return consumer.SettleReply{Err: lost(op, s.Key, s.Fence)}
}

// putCompleted writes s's completed record whole, if the record is the
// caller's live started claim with the fingerprint s carries and no operator
// notes (which the whole item would drop).
func (st *Store) putCompleted(ctx context.Context, s *consumer.Settlement, pk string, now int64) (bool, map[string]types.AttributeValue, error) {
	item := map[string]types.AttributeValue{
		attrPK: strAV(pk), "st": avDone, "fence": numAV(s.Fence), "attempts": numAV(int64(s.Attempts)),
		"created": numAV(s.Created.Unix()), "updated": numAV(now / 1000),
		attrExpires: numAV(ceilSec(now + st.s.Retention.Milliseconds())),
	}
	switch {
	case s.Dropped != "":
		item["dropped"] = strAV(s.Dropped)
	case len(s.Result) > MaxResult:
		st.s.Logger.Warn("dynamodb: result not kept: over the item size limit", "key", string(s.Key),
			"size", len(s.Result), "limit", MaxResult)
		item["dropped"] = strAV(strconv.Itoa(len(s.Result)))
	default:
		item["res"] = &types.AttributeValueMemberB{Value: append([]byte{}, s.Result...)}
	}
	vals := map[string]types.AttributeValue{":st": avStart, ":own": strAV(s.Owner), ":now": numAV(now / 1000)}
	// A record with operator notes is completed by the update, which keeps them.
	cond := "st = :st AND own = :own AND expires > :now AND attribute_not_exists(notes) AND "
	if s.Fingerprint.IsZero() {
		cond += "attribute_not_exists(fp)"
	} else {
		item["fp"] = &types.AttributeValueMemberB{Value: append([]byte(nil), s.Fingerprint[:]...)}
		vals[":fp"] = item["fp"]
		cond += "fp = :fp"
	}
	return st.put(ctx, item, cond, vals)
}

// owned decodes m and returns it when it is owner's live started claim, nil
// when it is not; the error is a corrupt record.
func (st *Store) owned(m map[string]types.AttributeValue, key consumer.Key, owner string, now int64) (*item, error) {
	if m == nil {
		return nil, nil
	}
	it, err := decode(m)
	if err != nil {
		return nil, &consumer.CorruptRecordError{Key: key, Reason: err.Error()}
	}
	if !it.live(now) || it.state != stateStarted || it.owner != owner {
		return nil, nil
	}
	return it, nil
}

func lost(op string, key consumer.Key, fence int64) error {
	return &consumer.LeaseLostError{Key: key, Fence: fence, Reason: op + ": the claim belongs to another owner or has ended"}
}
