package lua

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/redis/go-redis/v9"
)

// SettleArgs are the settings shared by one settle call.
type SettleArgs struct {
	MaxAttempts int
	Now         int64 // unix seconds, the caller's clock: updated times only
	// Retention is the one the caller's claims wrote in their started records
	// (BeginArgs.Retention). With it, the completion of a fresh claim (fence 1,
	// attempt 1) names the started record its claim wrote, byte for byte, and the
	// server compares that whole value: with SET ... IFEQ where the server has it,
	// without a script, else in the complete script's cheapest check. Zero: the
	// owner token is compared, as for every other claim.
	Retention time.Duration
}

// SettleItem finishes one attempt: Complete stores Result, otherwise the failure is
// recorded (Permanent or retryable, with Message).
type SettleItem struct {
	Key   string
	Owner string
	// Fence, Attempts, Created and Fingerprint are the claim's, as Begin answered:
	// a completion writes the completed record whole.
	Fence       int64
	Attempts    int
	Created     int64
	Fingerprint *[16]byte
	// Late says the caller's lease may have run out: the retention starts afresh.
	// (A caller that does not know its claim passes Fence 0: the record's own fence,
	// attempts, created time and fingerprint are kept, at one more write.)
	Late      bool
	Complete  bool
	Result    []byte
	Dropped   string // "" when Result is kept, else why not: the size, or "unencodable"
	Permanent bool
	Message   string // at most MaxErrorText bytes (see consumer.CapText)
}

// SettleBatch is a batch of settlements: Settle reads its items and answers each.
type SettleBatch interface {
	Len() int
	Item(i int) SettleItem
	Answer(i int, rep AckReply)
}

// Settlements is a SettleBatch over slices: the answers go to Replies (len(Items)).
type Settlements struct {
	Items   []SettleItem
	Replies []AckReply
}

// Len is len(s.Items).
func (s Settlements) Len() int { return len(s.Items) }

// Item is s.Items[i].
func (s Settlements) Item(i int) SettleItem { return s.Items[i] }

// Answer stores rep in s.Replies[i].
func (s Settlements) Answer(i int, rep AckReply) { s.Replies[i] = rep }

// Settle completes or fails the items of b, in one round trip: per hash slot group,
// one complete call and one fail call at most. Where the server has SET ... IFEQ
// (see cas.go), the completions of fresh claims travel in the same round trip as
// plain SET IFEQ commands instead; one that does not find its started record
// unchanged goes to the complete script in a second round trip.
func (r *Runner) Settle(ctx context.Context, a SettleArgs, b SettleBatch) {
	var calls []call
	var members [][]int
	var native []int // completions sent as SET IFEQ
	useCAS, ask := r.casMode()
	for _, g := range r.groups(b.Len(), func(i int) string { return b.Item(i).Key }) {
		var done, failed []int
		doneSize, failSize := 0, 0
		for _, i := range g {
			it := b.Item(i)
			switch {
			case it.Complete && useCAS && exactLen(a, &it) > 0:
				native = append(native, i)
			case it.Complete:
				if done == nil {
					done = make([]int, 0, len(g))
				}
				done = append(done, i)
				doneSize += completeLen(a, &it)
			default:
				failed = append(failed, i)
				failSize += 8 + len(it.Owner) + min(len(it.Message), MaxErrorText)
			}
		}
		if len(done) > 0 {
			calls, members = append(calls, completeCall(a, b, done, doneSize)), append(members, done)
		}
		if len(failed) > 0 {
			calls, members = append(calls, failCall(a, b, failed, failSize)), append(members, failed)
		}
	}
	if len(native) == 0 && !ask {
		reps, bound := r.execWith(ctx, calls, nil)
		r.answerAcks(calls, members, reps, b.Answer)
		release(calls, bound)
		return
	}
	cmds := casCommands(ctx, a, b, native)
	extra := cmds
	var question *redis.Cmd
	if ask { // ask whether SET takes IFEQ, in this round trip
		question = casQuestion(ctx)
		extra = append(extra, question)
	}
	reps, bound := r.execWith(ctx, calls, extra)
	if ask {
		if bound != nil {
			r.casLearn(false, bound)
		} else {
			r.casLearn(casAnswer(question))
		}
	}
	r.answerAcks(calls, members, reps, b.Answer)
	release(calls, bound)
	again := r.casAnswers(b, native, cmds, bound)
	if len(again) == 0 {
		return
	}
	calls, members = calls[:0], members[:0]
	for _, g := range r.groups(len(again), func(j int) string { return b.Item(again[j]).Key }) {
		size := 0
		for j, e := range g { // group members are positions in again: make them item indexes
			g[j] = again[e]
			it := b.Item(g[j])
			size += completeLen(a, &it)
		}
		calls, members = append(calls, completeCall(a, b, g, size)), append(members, g)
	}
	reps, bound = r.execWith(ctx, calls, nil)
	r.answerAcks(calls, members, reps, b.Answer)
	release(calls, bound)
}

// exactLen is the length of the started record that it's claim wrote, when the
// caller can know it whole: a fresh claim (fence 1, attempt 1, neither locked nor
// counted, as the engine's claims are) with a known retention, of at most 255
// bytes. Zero otherwise.
func exactLen(a SettleArgs, it *SettleItem) int {
	if a.Retention <= 0 || it.Fence != 1 || it.Attempts != 1 {
		return 0
	}
	if n := startedLen(it.Fingerprint != nil, it.Owner); n <= 255 {
		return n
	}
	return 0
}

// completeLen bounds the length of it's entry in a complete call.
func completeLen(a SettleArgs, it *SettleItem) int {
	return 12 + max(1+len(it.Owner), exactLen(a, it)) + headerLen + fpLen + len(it.Result) + len(it.Dropped)
}

func completeCall(a SettleArgs, b SettleBatch, idx []int, size int) call {
	buf := newCallBuf(len(idx), size)
	blob, keys := buf.blob, buf.keys
	for j, i := range idx {
		it := b.Item(i)
		keys[j] = it.Key
		flag := byte('-')
		switch {
		case it.Fence == 0: // the caller does not know its claim: keep the record's
			flag = '?'
		case it.Late:
			flag = 'l'
		}
		at := byte(headerLen + 1) // the owner's length byte, 1-based, in the started record
		if it.Fingerprint != nil {
			at += fpLen
		}
		if n := exactLen(a, &it); n > 0 { // the started record the claim wrote, whole
			blob = append(blob, flag, '=', at, byte(n))
			blob = AppendStarted(blob, it.Owner, it.Fingerprint, false, false, a.Retention, it.Created)
		} else {
			blob = append(blob, flag, 'o', at, byte(1+len(it.Owner)), byte(len(it.Owner)))
			blob = append(blob, it.Owner...)
		}
		blob = binary.BigEndian.AppendUint32(blob, uint32(it.Fence))
		vat := len(blob)
		blob = append(blob, 0, 0, 0, 0)
		blob = AppendCompleted(blob, it.Fence, it.Attempts, it.Fingerprint, it.Created, a.Now, it.Result, it.Dropped)
		binary.BigEndian.PutUint32(blob[vat:], uint32(len(blob)-vat-4))
	}
	buf.blob = blob
	return call{script: CompleteScript, keys: keys, args: []any{blob}, buf: buf}
}

func failCall(a SettleArgs, b SettleBatch, idx []int, size int) call {
	blob := make([]byte, 0, size)
	keys := make([]string, len(idx))
	for j, i := range idx {
		it := b.Item(i)
		keys[j] = it.Key
		msg := consumer.CapText(it.Message, MaxErrorText)
		mode := byte('r')
		if it.Permanent {
			mode = 'p'
		}
		blob = binary.BigEndian.AppendUint32(blob, uint32(it.Fence))
		blob = append(blob, mode, byte(len(it.Owner)))
		blob = append(blob, it.Owner...)
		blob = binary.BigEndian.AppendUint16(blob, uint16(len(msg)))
		blob = append(blob, msg...)
	}
	return call{script: FailScript, keys: keys, args: []any{a.Now, a.MaxAttempts, blob}}
}
