package idemkittest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/typednil"
)

// FaultStore is a consumer.Store that injects faults into the calls it passes
// to another store: a call that fails, waits, or is applied and loses its reply,
// and attempts whose worker crashes. It is what the kit's scenarios run on, and
// it can be used on its own to put any store idemkit runs on (the memory store,
// Redis, PostgreSQL, DynamoDB) under a fault of the test's choosing:
//
//	fs, _ := idemkittest.NewFaultStore(store)
//	_ = fs.Inject(idemkittest.Fault{Op: idemkittest.OpSettle, Action: idemkittest.LoseReply})
//	r := consumer.ExecuteIdempotently(ctx, fs, key, payload, handler) // the completion applies; its reply is lost
//
// It passes Settings through unchanged, and does not pass on the operator
// methods of the store under it. It is safe for concurrent use.
type FaultStore struct {
	inner consumer.Store

	mu      sync.Mutex
	faults  []*armed
	calls   [OpPeek + 1]int
	crashed map[attempt]bool
	owners  map[string]bool // owner tokens of crashed attempts: their claims are lost too
	byClaim map[attempt]string
}

var _ consumer.Store = (*FaultStore)(nil)

// attempt names one attempt by its key and fence.
type attempt struct {
	key   consumer.Key
	fence int64
}

// armed is an injected fault and how many matching calls it has seen.
type armed struct {
	Fault
	seen, hit int
}

// NewFaultStore wraps store. It fails when store is nil.
func NewFaultStore(store consumer.Store) (*FaultStore, error) {
	if store == nil || typednil.Is(store) {
		return nil, errors.New("idemkittest: NewFaultStore: nil store: pass the store the faults are to hit")
	}
	return &FaultStore{inner: store, crashed: map[attempt]bool{}, owners: map[string]bool{}, byClaim: map[attempt]string{}}, nil
}

// Inject adds f; it hits calls made from now on. It fails, adding nothing, when a
// field of f is out of range.
func (fs *FaultStore) Inject(f Fault) error {
	if fs == nil {
		return errNilFaultStore
	}
	if err := f.validate(); err != nil {
		return err
	}
	if f.Nth == 0 {
		f.Nth = 1
	}
	if f.Count == 0 {
		f.Count = 1
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.faults = append(fs.faults, &armed{Fault: f})
	return nil
}

// Clear removes every fault: the store answers normally again. Crashed attempts
// stay crashed: a dead worker does not come back.
func (fs *FaultStore) Clear() {
	if fs == nil {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.faults = nil
}

// Crash makes the worker running the attempt at key with fence die now: none of
// its later calls (renewals, its completion or failure, its release, a claim
// sent again under its owner token) reaches the store, so its record stays as
// the crash left it, until its lease runs out. In the test process the library
// sees those calls refused, as lease lost; no store ever sees them.
func (fs *FaultStore) Crash(key consumer.Key, fence int64) {
	if fs == nil {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.crashLocked(attempt{key, fence})
}

func (fs *FaultStore) crashLocked(a attempt) {
	fs.crashed[a] = true
	if owner, ok := fs.byClaim[a]; ok {
		fs.owners[owner] = true
	}
}

// Calls reports how many calls of op the store has answered, faults or not
// (a call is counted once its answer is ready).
func (fs *FaultStore) Calls(op Op) int {
	if fs == nil || op < OpBegin || op > OpPeek {
		return 0
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.calls[op]
}

var errNilFaultStore = errors.New("idemkittest: nil FaultStore: make it with NewFaultStore")

// item is what a fault looks at in one item of a call.
type item struct {
	key      consumer.Key
	owner    string
	fence    int64 // 0: the item carries none (claims, reads)
	hasFence bool
}

// fate is what happens to one item of a call.
type fate struct {
	send  bool  // the item goes to the store
	err   error // the answer, when it does not go or its reply is lost
	crash bool  // its attempt dies after the call
}

// plan decides the fate of each item of one call of op, and how long the call
// waits before it goes.
func (fs *FaultStore) plan(op Op, items []item) (fates []fate, delay time.Duration) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fates = make([]fate, len(items))
	for i, it := range items {
		fates[i].send = true
		if fs.owners[it.owner] || it.hasFence && fs.crashed[attempt{it.key, it.fence}] {
			fates[i] = fate{err: &consumer.LeaseLostError{Key: it.key, Fence: it.fence, Reason: errCrashed}}
		}
	}
	hitBy := make([]*armed, len(items))
	for _, f := range fs.faults {
		if f.Op != op {
			continue
		}
		var match []int
		for i, it := range items {
			if (f.Key == "" || f.Key == it.key) && (f.Fence == 0 || it.hasFence && f.Fence == it.fence) {
				match = append(match, i)
			}
		}
		if len(match) == 0 {
			continue
		}
		f.seen++
		if f.seen < f.Nth || f.Count != Forever && f.hit >= f.Count {
			continue
		}
		f.hit++
		if f.Action == DelayCall {
			delay = max(delay, f.Delay)
			continue
		}
		for _, i := range match {
			if hitBy[i] == nil && fates[i].send {
				hitBy[i] = f
			}
		}
	}
	for i, f := range hitBy {
		if f == nil {
			continue
		}
		err := f.Err
		if err == nil && f.Action == LoseReply {
			err = &consumer.StoreError{Op: op.String(), Err: ErrReplyLost}
		} else if err == nil {
			err = &consumer.StoreError{Op: op.String(), Err: ErrInjected}
		}
		fates[i] = fate{send: f.Action == LoseReply, err: err, crash: f.Crash}
		if f.Crash && f.Action == FailCall && items[i].hasFence {
			fs.crashLocked(attempt{items[i].key, items[i].fence})
		}
	}
	return fates, delay
}

// afterCall records the claims that were made (so that a crash finds their owner
// token) and the crashes of attempts whose call went through.
func (fs *FaultStore) afterCall(op Op, items []item, fates []fate, fences []int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, it := range items {
		fence := it.fence
		if fences != nil {
			fence = fences[i]
			if fence != 0 {
				fs.byClaim[attempt{it.key, fence}] = it.owner
			}
		}
		if fates[i].crash && fates[i].send && fence != 0 {
			fs.crashLocked(attempt{it.key, fence})
		}
	}
}

// answered counts a call of op that has its answer.
func (fs *FaultStore) answered(op Op) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.calls[op]++
}

// wait holds a call back for delay, or until ctx ends (then it reports false).
func wait(ctx context.Context, delay time.Duration) bool {
	if delay <= 0 {
		return true
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// sent returns the indexes of the items that go to the store.
func sent(fates []fate) []int {
	var out []int
	for i, f := range fates {
		if f.send {
			out = append(out, i)
		}
	}
	return out
}

// Settings returns the wrapped store's settings.
func (fs *FaultStore) Settings() consumer.Settings {
	if fs == nil {
		return consumer.Settings{}
	}
	return fs.inner.Settings()
}

// Begin claims records through the wrapped store, faults permitting.
func (fs *FaultStore) Begin(ctx context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	out := make([]consumer.ClaimReply, len(claims))
	if fs == nil {
		for i := range out {
			out[i].Err = errNilFaultStore
		}
		return out
	}
	defer fs.answered(OpBegin)
	items := make([]item, len(claims))
	for i, c := range claims {
		items[i] = item{key: c.Key, owner: c.Owner}
	}
	fates, delay := fs.plan(OpBegin, items)
	if !wait(ctx, delay) {
		for i := range out {
			out[i].Err = &consumer.StoreError{Op: "begin", Err: ctx.Err()}
		}
		return out
	}
	idx := sent(fates)
	fences := make([]int64, len(claims))
	if len(idx) > 0 {
		sub := make([]consumer.Claim, len(idx))
		for j, i := range idx {
			sub[j] = claims[i]
		}
		reps := fs.inner.Begin(ctx, sub)
		for j, i := range idx {
			if j < len(reps) {
				out[i] = reps[j]
			} else {
				out[i].Err = &consumer.StoreError{Op: "begin", Err: errors.New("the store answered fewer claims than it was sent")}
			}
			if out[i].Claimed() {
				fences[i] = out[i].Fence
			}
		}
	}
	for i, f := range fates {
		if f.err != nil {
			out[i] = consumer.ClaimReply{Err: f.err}
		}
	}
	fs.afterCall(OpBegin, items, fates, fences)
	return out
}

// Settle completes or fails claimed records through the wrapped store, faults
// permitting.
func (fs *FaultStore) Settle(ctx context.Context, sts []consumer.Settlement) []consumer.SettleReply {
	out := make([]consumer.SettleReply, len(sts))
	if fs == nil {
		for i := range out {
			out[i].Err = errNilFaultStore
		}
		return out
	}
	defer fs.answered(OpSettle)
	items := make([]item, len(sts))
	for i, s := range sts {
		items[i] = item{key: s.Key, owner: s.Owner, fence: s.Fence, hasFence: true}
	}
	fates, delay := fs.plan(OpSettle, items)
	if !wait(ctx, delay) {
		for i := range out {
			out[i].Err = &consumer.StoreError{Op: "settle", Err: ctx.Err()}
		}
		return out
	}
	if idx := sent(fates); len(idx) > 0 {
		sub := make([]consumer.Settlement, len(idx))
		for j, i := range idx {
			sub[j] = sts[i]
		}
		reps := fs.inner.Settle(ctx, sub)
		for j, i := range idx {
			if j < len(reps) {
				out[i] = reps[j]
			} else {
				out[i].Err = &consumer.StoreError{Op: "settle", Err: errors.New("the store answered fewer items than it was sent")}
			}
		}
	}
	for i, f := range fates {
		if f.err != nil {
			out[i] = consumer.SettleReply{Err: f.err}
		}
	}
	fs.afterCall(OpSettle, items, fates, nil)
	return out
}

// Extend renews leases through the wrapped store, faults permitting.
func (fs *FaultStore) Extend(ctx context.Context, owned []consumer.Owned) []error {
	return fs.owned(ctx, OpExtend, owned, func(ctx context.Context, o []consumer.Owned) []error { return fs.inner.Extend(ctx, o) })
}

// Release gives claims back through the wrapped store, faults permitting.
func (fs *FaultStore) Release(ctx context.Context, owned []consumer.Owned) []error {
	return fs.owned(ctx, OpRelease, owned, func(ctx context.Context, o []consumer.Owned) []error { return fs.inner.Release(ctx, o) })
}

func (fs *FaultStore) owned(ctx context.Context, op Op, owned []consumer.Owned,
	call func(context.Context, []consumer.Owned) []error) []error {
	out := make([]error, len(owned))
	if fs == nil {
		for i := range out {
			out[i] = errNilFaultStore
		}
		return out
	}
	defer fs.answered(op)
	items := make([]item, len(owned))
	for i, o := range owned {
		items[i] = item{key: o.Key, owner: o.Owner, fence: o.Fence, hasFence: true}
	}
	fates, delay := fs.plan(op, items)
	if !wait(ctx, delay) {
		for i := range out {
			out[i] = &consumer.StoreError{Op: op.String(), Err: ctx.Err()}
		}
		return out
	}
	if idx := sent(fates); len(idx) > 0 {
		sub := make([]consumer.Owned, len(idx))
		for j, i := range idx {
			sub[j] = owned[i]
		}
		errs := call(ctx, sub)
		for j, i := range idx {
			if j < len(errs) {
				out[i] = errs[j]
			} else {
				out[i] = &consumer.StoreError{Op: op.String(), Err: errors.New("the store answered fewer items than it was sent")}
			}
		}
	}
	for i, f := range fates {
		if f.err != nil {
			out[i] = f.err
		}
	}
	fs.afterCall(op, items, fates, nil)
	return out
}

// Peek reads one record through the wrapped store, faults permitting.
func (fs *FaultStore) Peek(ctx context.Context, key consumer.Key) (consumer.Record, error) {
	if fs == nil {
		return consumer.Record{}, errNilFaultStore
	}
	defer fs.answered(OpPeek)
	items := []item{{key: key}}
	fates, delay := fs.plan(OpPeek, items)
	if !wait(ctx, delay) {
		return consumer.Record{}, &consumer.StoreError{Op: "peek", Err: ctx.Err()}
	}
	var rec consumer.Record
	var err error
	if fates[0].send {
		rec, err = fs.inner.Peek(ctx, key)
	}
	if fates[0].err != nil {
		return consumer.Record{}, fates[0].err
	}
	return rec, err
}
