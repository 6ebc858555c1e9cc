package redis

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/typednil"
	"github.com/idemkit/idemkit/lua"
	goredis "github.com/redis/go-redis/v9"
)

// Store keeps records in Redis, changed only by the scripts of package lua.
// It works with any go-redis UniversalClient: a single server, a Sentinel-managed
// primary (redis.NewFailoverClient of go-redis) or a Redis Cluster. It is safe for concurrent use.
type Store struct {
	s        consumer.Settings
	client   goredis.UniversalClient
	runner   *lua.Runner
	eviction EvictionCheck // what WithEvictionCheck set
	acks     replicaAcks   // what WithReplicaAcks and WithReplicaAcksOnClaims set
	warned   sync.Map      // what warnOnce has logged
}

var _ consumer.Store = (*Store)(nil)

// NewStore returns a store on client. It checks the options and fails with
// ErrInvalidConfig when one is out of range (WithReplicaAcks's count below 0, its
// timeout not above 0 or not below the call and read timeouts, or with a Ring). It then reads each node's
// configuration, in one round trip bounded by a second: a node whose
// maxmemory-policy may evict records is logged at Warn, or refused under
// WithEvictionCheck(EvictionRefuse); a node that keeps nothing on disk is logged;
// a node that does not answer is logged, not refused (workers may start before
// Redis; claims fail closed until it answers; call Check to wait for it). Scripts
// are loaded on first use and reloaded whenever the server has lost them.
func NewStore(client goredis.UniversalClient, opts ...consumer.Option) (*Store, error) {
	if client == nil || typednil.Is(client) {
		return nil, configError("nil Redis client: pass a *redis.Client, *redis.ClusterClient or redis.NewUniversalClient(...)")
	}
	s, err := consumer.NewSettings(opts...)
	if err != nil {
		return nil, err
	}
	eviction, err := evictionCheck(s)
	if err != nil {
		return nil, err
	}
	acks, err := replicaAcksOf(s, client)
	if err != nil {
		return nil, err
	}
	r := &Store{s: s, client: client, runner: lua.NewRunner(client), eviction: eviction, acks: acks}
	if err := r.startupCheck(); err != nil {
		return nil, err
	}
	return r, nil
}

// Settings returns the store's resolved options (zero Settings on a nil store,
// which ExecuteIdempotently and ExecuteBatch refuse with ErrInvalidConfig).
func (r *Store) Settings() consumer.Settings {
	if r == nil {
		return consumer.Settings{}
	}
	return r.s
}

// Load loads the scripts into Redis (on every primary of a cluster) ahead of the
// first call. Optional: scripts are loaded on demand too.
func (r *Store) Load(ctx context.Context) error {
	if r == nil {
		return errNilStore
	}
	if err := r.runner.Load(ctx); err != nil {
		return &consumer.StoreError{Op: "load", Err: err}
	}
	return nil
}

// RecordKey is the Redis key of key's record: <prefix>:{<scope>:<key>}.
func (r *Store) RecordKey(key consumer.Key) string {
	if r == nil {
		return ""
	}
	return r.s.Prefix + ":{" + r.s.Scope + ":" + string(key) + "}"
}

// Begin claims records: a fresh key with one plain SET NX PX (a batch of them in
// one pipeline), an existing one through the begin script's state machine in a
// second round trip that only batches with existing keys pay. A claim marked
// consumer.Claim.ReadFirst (the HTTP middleware's) reads the record first: a
// completed or failed record whose fingerprint matches is answered from that one
// GET, with no script and no write; any other record goes to the begin script,
// and a missing one to the SET NX claim.
func (r *Store) Begin(ctx context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	if r == nil {
		return nilStore[consumer.ClaimReply](len(claims), func(err error) consumer.ClaimReply { return consumer.ClaimReply{Err: err} })
	}
	out := make([]consumer.ClaimReply, len(claims))
	r.BeginInto(ctx, claims, out)
	return out
}

// BeginInto is Begin answering claim i in out[i] (consumer.StoreInto), for callers
// that reuse out. out must hold exactly one zero element per claim; otherwise
// nothing is claimed and every element of out gets ErrInvalidConfig.
func (r *Store) BeginInto(ctx context.Context, claims []consumer.Claim, out []consumer.ClaimReply) {
	if err := intoCheck(r, len(claims), len(out)); err != nil {
		for i := range out {
			out[i] = consumer.ClaimReply{Err: err}
		}
		return
	}
	b := &beginBatch{claims: claims, out: out}
	r.recordKeys(len(claims), func(i int) consumer.Key { return claims[i].Key }, func(i int, ref string) { b.out[i].Ref = ref })
	ctx, cancel := r.bound(ctx)
	defer cancel()
	r.runner.Begin(ctx, lua.BeginArgs{Lease: r.s.Lease, Retention: r.s.Retention, MaxAttempts: r.s.MaxAttempts,
		Now: time.Now().Unix()}, b)
	if r.acks.n > 0 {
		r.claimAcks(ctx, b)
	}
}

var _ consumer.StoreInto = (*Store)(nil)

// intoCheck is the error of a BeginInto or SettleInto call on r with n items and
// an out of length outs, or nil.
func intoCheck(r *Store, n, outs int) error {
	switch {
	case r == nil:
		return errNilStore
	case outs != n:
		return configError("an out of length %d for %d items: pass an out of the items' length", outs, n)
	}
	return nil
}

// beginBatch is a Begin call's claims as the lua runner reads them.
type beginBatch struct {
	claims []consumer.Claim
	out    []consumer.ClaimReply // Ref set beforehand
}

func (b *beginBatch) Len() int { return len(b.claims) }

func (b *beginBatch) Item(i int) lua.BeginItem {
	c := &b.claims[i]
	it := lua.BeginItem{Key: b.out[i].Ref, Owner: c.Owner, Locked: c.Locked, Start: c.Start, ReadFirst: c.ReadFirst}
	if !c.Fingerprint.IsZero() {
		it.Fingerprint = (*[16]byte)(&c.Fingerprint)
	}
	return it
}

func (b *beginBatch) Answer(i int, rep lua.BeginReply) { claimReply(&b.out[i], b.claims[i].Key, &rep) }

// recordKeys makes the record keys of the n keys key(i) in one allocation, and
// gives record key i to set(i, ref).
func (r *Store) recordKeys(n int, key func(i int) consumer.Key, set func(i int, ref string)) {
	fixed := len(r.s.Prefix) + len(r.s.Scope) + 4 // <prefix>:{<scope>:<key>}
	size := 0
	for i := 0; i < n; i++ {
		size += fixed + len(key(i))
	}
	var sb strings.Builder
	sb.Grow(size)
	for i := 0; i < n; i++ {
		sb.WriteString(r.s.Prefix)
		sb.WriteString(":{")
		sb.WriteString(r.s.Scope)
		sb.WriteByte(':')
		sb.WriteString(string(key(i)))
		sb.WriteByte('}')
	}
	all := sb.String()
	start := 0
	for i := 0; i < n; i++ {
		end := start + fixed + len(key(i))
		set(i, all[start:end])
		start = end
	}
}

// claimReply fills c (whose Ref is set) from the script's answer.
func claimReply(c *consumer.ClaimReply, key consumer.Key, rep *lua.BeginReply) {
	if rep.Err != nil {
		c.Err = &consumer.StoreError{Op: "begin", Err: rep.Err}
		return
	}
	c.Fence, c.Attempts, c.Lease = rep.Fence, rep.Attempts, millis(rep.Millis)
	c.Created = time.Unix(rep.Created, 0)
	if rep.HasFP {
		c.Fingerprint = rep.Fingerprint
	}
	switch rep.Code {
	case lua.Acquired:
		c.Status = consumer.StatusAcquired
	case lua.TakenOver:
		c.Status = consumer.StatusTakenOver
	case lua.InProgress:
		c.Status = consumer.StatusInProgress
	case lua.Duplicate:
		c.Status, c.Result, c.Dropped = consumer.StatusCompleted, []byte(rep.Data), rep.Flag
	case lua.Failed:
		c.Status, c.Message, c.Permanent = consumer.StatusFailed, rep.Data, rep.Flag != "x"
	case lua.Exhausted:
		c.Status, c.Message = consumer.StatusExhausted, rep.Data
	case lua.Conflict:
		c.Status = consumer.StatusConflict
	default:
		c.Err = &consumer.CorruptRecordError{Key: key, Reason: rep.Data}
	}
}

// ref is the record key the caller passed back, or the one worked out again.
func (r *Store) ref(ref string, key consumer.Key) string {
	if ref != "" {
		return ref
	}
	return r.RecordKey(key)
}

// Settle completes or fails claimed records, in one round trip.
func (r *Store) Settle(ctx context.Context, items []consumer.Settlement) []consumer.SettleReply {
	if r == nil {
		return nilStore[consumer.SettleReply](len(items), func(err error) consumer.SettleReply { return consumer.SettleReply{Err: err} })
	}
	out := make([]consumer.SettleReply, len(items))
	r.SettleInto(ctx, items, out)
	return out
}

// SettleInto is Settle answering item i in out[i] (consumer.StoreInto), for
// callers that reuse out. out must hold exactly one zero element per item;
// otherwise nothing is settled and every element of out gets ErrInvalidConfig.
func (r *Store) SettleInto(ctx context.Context, items []consumer.Settlement, out []consumer.SettleReply) {
	if err := intoCheck(r, len(items), len(out)); err != nil {
		for i := range out {
			out[i] = consumer.SettleReply{Err: err}
		}
		return
	}
	b := &settleBatch{items: items, out: out}
	for i := range items {
		if items[i].Ref == "" { // the caller did not pass the claims' refs back: work them out once
			b.refs = make([]string, len(items))
			r.recordKeys(len(items), func(i int) consumer.Key { return items[i].Key }, func(i int, ref string) { b.refs[i] = ref })
			break
		}
	}
	ctx, cancel := r.bound(ctx)
	defer cancel()
	r.runner.Settle(ctx, lua.SettleArgs{MaxAttempts: r.s.MaxAttempts, Now: time.Now().Unix(), Retention: r.s.Retention}, b)
	if r.acks.n > 0 {
		r.settleAcks(ctx, b)
	}
}

// settleBatch is a Settle call's items as the lua runner reads them.
type settleBatch struct {
	items []consumer.Settlement
	refs  []string // the record keys, when the items lack their Ref
	out   []consumer.SettleReply
}

func (b *settleBatch) Len() int { return len(b.items) }

func (b *settleBatch) Item(i int) lua.SettleItem {
	it := &b.items[i]
	key := it.Ref
	if b.refs != nil {
		key = b.refs[i]
	}
	si := lua.SettleItem{
		Key: key, Owner: it.Owner, Fence: it.Fence, Attempts: it.Attempts,
		Created: it.Created.Unix(), Late: it.Late, Complete: it.Complete, Result: it.Result,
		Dropped: it.Dropped, Permanent: it.Permanent, Message: it.Message,
	}
	if !it.Fingerprint.IsZero() {
		si.Fingerprint = (*[16]byte)(&it.Fingerprint)
	}
	return si
}

func (b *settleBatch) Answer(i int, rep lua.AckReply) {
	op := "complete"
	if !b.items[i].Complete {
		op = "fail"
	}
	b.out[i].Terminal = rep.Ack == lua.AckTerminal
	b.out[i].Err = ackErr(op, b.items[i].Key, b.items[i].Fence, rep)
}

// Extend renews the leases of running attempts, in one round trip.
func (r *Store) Extend(ctx context.Context, items []consumer.Owned) []error {
	return r.owned(ctx, "extend", items)
}

// Release gives claims back without a result, in one round trip.
func (r *Store) Release(ctx context.Context, items []consumer.Owned) []error {
	return r.owned(ctx, "release", items)
}

func (r *Store) owned(ctx context.Context, op string, items []consumer.Owned) []error {
	if r == nil {
		return nilStore[error](len(items), func(err error) error { return err })
	}
	ctx, cancel := r.bound(ctx)
	defer cancel()
	in := make([]lua.OwnedKey, len(items))
	for i, it := range items {
		in[i] = lua.OwnedKey{Key: r.ref(it.Ref, it.Key), Owner: it.Owner, Fence: it.Fence}
	}
	var reps []lua.AckReply
	if op == "extend" {
		reps = r.runner.Extend(ctx, r.s.Lease, in)
	} else {
		reps = r.runner.Release(ctx, time.Now().Unix(), in)
	}
	out := make([]error, len(items))
	for i, rep := range reps {
		out[i] = ackErr(op, items[i].Key, items[i].Fence, rep)
	}
	return out
}

func ackErr(op string, key consumer.Key, fence int64, rep lua.AckReply) error {
	switch {
	case rep.Err != nil:
		return &consumer.StoreError{Op: op, Err: rep.Err}
	case rep.Ack == lua.AckLeaseLost:
		return &consumer.LeaseLostError{Key: key, Fence: fence, Reason: op + ": the claim belongs to another owner or has ended"}
	case rep.Ack == lua.AckCorrupt:
		return &consumer.CorruptRecordError{Key: key, Reason: "key holds a value that is not an idemkit record"}
	}
	return nil
}

// Peek reads one record without changing it.
func (r *Store) Peek(ctx context.Context, key consumer.Key) (consumer.Record, error) {
	if r == nil {
		return consumer.Record{}, errNilStore
	}
	if err := key.Validate(); err != nil {
		return consumer.Record{}, err
	}
	ctx, cancel := r.bound(ctx)
	defer cancel()
	rec, err := r.runner.Peek(ctx, r.RecordKey(key))
	if err != nil {
		return consumer.Record{}, &consumer.StoreError{Op: "peek", Err: err}
	}
	if rec.Corrupt {
		return consumer.Record{Key: key, Found: true}, &consumer.CorruptRecordError{Key: key, Reason: rec.Reason}
	}
	return recordOf(key, rec), nil
}

// recordOf is a record read by package lua (found, not corrupt) as Peek answers it.
func recordOf(key consumer.Key, rec lua.Record) consumer.Record {
	out := consumer.Record{Key: key, Found: rec.Found, Now: rec.Now, TTL: rec.TTL}
	if !rec.Found {
		return out
	}
	f := &rec.Fields
	out.State, out.Owner, out.Fence, out.Attempts = f.StateName(), f.Owner, f.Fence, f.Attempts
	out.Fingerprint, out.LeaseUntil, out.Retention = f.Fingerprint, rec.LeaseUntil, f.Retention
	out.Locked, out.Created, out.Updated = f.Flags&lua.FlagLocked != 0, f.Created, f.Updated
	out.Counted = f.State == lua.StateStarted && f.Flags&lua.FlagCounted != 0
	out.Permanent = f.State == lua.StateFailed && f.Flags&lua.FlagPermanent != 0
	switch {
	case f.State != lua.StateCompleted:
	case f.Flags&lua.FlagDropped != 0:
		out.Dropped = string(f.Result)
	default:
		out.Result = f.Result
	}
	for _, h := range f.History {
		out.History = append(out.History, consumer.AttemptError(h))
	}
	if len(out.History) > 0 {
		out.Error = out.History[0].Message
	}
	return out
}

// bound limits ctx to the call timeout: the runner stops waiting for a reply then,
// whether or not the client honours context deadlines.
func (r *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= r.s.CallTimeout {
		return ctx, func() {} // the caller's bound is already as tight
	}
	return context.WithTimeout(ctx, r.s.CallTimeout)
}

func millis(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
