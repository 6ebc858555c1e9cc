package redis_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lua"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// fullRedis is a private redis-server under maxmemory-policy noeviction (the
// policy the store's eviction check asks for) that a test takes to its memory
// limit, as other traffic would, and frees again. At its limit Redis refuses
// every write that may take memory.
type fullRedis struct {
	c *redis.Client
}

// store is a store on f's private server, under one prefix for every test.
func (f fullRedis) store(t *testing.T, opts ...consumer.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.NewStore(f.c, append([]consumer.Option{consumer.WithPrefix("full"), consumer.WithScope("full")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newFullRedis(t *testing.T) fullRedis {
	srv := testenv.RedisServer(t, "--maxmemory-policy", "noeviction")
	return fullRedis{c: srv.Client(t)}
}

// fill sets maxmemory a little above what Redis uses, then writes past it.
func (f fullRedis) fill(ctx context.Context) error {
	info, err := f.c.Info(ctx, "memory").Result()
	if err != nil {
		return err
	}
	var used int64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "used_memory:"); ok {
			used, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if used == 0 || err != nil {
		return fmt.Errorf("no used_memory in INFO memory (%v)", err)
	}
	if err := f.c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+256<<10, 10)).Err(); err != nil {
		return err
	}
	if err := f.c.SetRange(ctx, "filler", 1<<20, "x").Err(); err != nil {
		return err
	}
	if err := f.c.Set(ctx, "probe", "1", 0).Err(); err == nil || !redis.HasErrorPrefix(err, "OOM") {
		return fmt.Errorf("want Redis at its memory limit, a write answered %v", err)
	}
	return nil
}

// free deletes what fill wrote (DEL is never refused), lifts the limit, and
// checks that Redis takes writes again. The limit goes: what else Redis holds may
// have grown since fill measured it (a script loaded, a reply buffer), and the
// filler's room alone may then not be enough for the next transition.
func (f fullRedis) free(ctx context.Context) error {
	if err := f.c.Del(ctx, "filler").Err(); err != nil {
		return err
	}
	if err := f.c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		return err
	}
	return f.c.Set(ctx, "probe", "1", time.Minute).Err()
}

// refusedStoreError checks that err is what a store answers when Redis refuses a
// write: a *consumer.StoreError matching ErrStoreUnavailable, never a corrupt record.
func refusedStoreError(err error) error {
	var se *consumer.StoreError
	if !errors.As(err, &se) || !errors.Is(err, consumer.ErrStoreUnavailable) || errors.Is(err, consumer.ErrCorruptRecord) ||
		!consumer.Retryable(err) {
		return fmt.Errorf("want a *consumer.StoreError for a write Redis refused, got %T %v", err, err)
	}
	return nil
}

// oomCase is one transition, made on two records in one call (so that a call
// refused half way would show), first at Redis's memory limit, then after.
type oomCase struct {
	name  string
	setup func(e *oomEnv, keys []consumer.Key)
	act   func(e *oomEnv, keys []consumer.Key) []error
}

// oomEnv is the store the cases run on, and the claims their setups made.
type oomEnv struct {
	t      *testing.T
	ctx    context.Context
	s      *redisstore.Store
	redis  fullRedis
	claims map[consumer.Key]consumer.ClaimReply
}

func (e *oomEnv) claim(s *redisstore.Store, key consumer.Key, owner string, locked bool) consumer.ClaimReply {
	e.t.Helper()
	rep := s.Begin(e.ctx, []consumer.Claim{{Key: key, Owner: owner, Locked: locked, Fingerprint: consumer.FingerprintOf([]byte("p"))}})[0]
	if !rep.Claimed() {
		e.t.Fatalf("claim %s by %s: %+v", key, owner, rep)
	}
	e.claims[key] = rep
	return rep
}

// settlement settles key's claim (by owner o).
func (e *oomEnv) settlement(key consumer.Key, complete, permanent bool) consumer.Settlement {
	c := e.claims[key]
	return consumer.Settlement{Key: key, Owner: "o", Ref: c.Ref, Fence: c.Fence, Attempts: c.Attempts, Created: c.Created,
		Fingerprint: c.Fingerprint, Complete: complete, Result: []byte(`"ok"`), Permanent: permanent, Message: "declined"}
}

func (e *oomEnv) settle(keys []consumer.Key, complete, permanent bool) []error {
	sts := make([]consumer.Settlement, len(keys))
	for i, k := range keys {
		sts[i] = e.settlement(k, complete, permanent)
	}
	var out []error
	for _, rep := range e.s.Settle(e.ctx, sts) {
		out = append(out, rep.Err)
	}
	return out
}

// begin claims keys for new owners through s, and wants status once Redis has room.
func (e *oomEnv) begin(s *redisstore.Store, keys []consumer.Key, locked bool, want consumer.ClaimStatus) []error {
	claims := make([]consumer.Claim, len(keys))
	for i, k := range keys {
		claims[i] = consumer.Claim{Key: k, Owner: "new-owner", Locked: locked, Fingerprint: consumer.FingerprintOf([]byte("p"))}
	}
	var out []error
	for _, rep := range s.Begin(e.ctx, claims) {
		err := rep.Err
		if err == nil && rep.Status != want {
			err = fmt.Errorf("status %v, want %v", rep.Status, want)
		}
		out = append(out, err)
	}
	return out
}

func (e *oomEnv) owned(keys []consumer.Key) []consumer.Owned {
	out := make([]consumer.Owned, len(keys))
	for i, k := range keys {
		c := e.claims[k]
		out[i] = consumer.Owned{Key: k, Owner: "o", Ref: c.Ref, Fence: c.Fence}
	}
	return out
}

func (e *oomEnv) change(keys []consumer.Key, op consumer.OperatorOp) []error {
	var out []error
	for _, k := range keys {
		rep, err := e.s.ChangeRecord(e.ctx, consumer.OperatorChange{Op: op, Key: k, Note: op.String() + " by test: oom"})
		if err == nil && rep.Status != consumer.ChangeApplied {
			err = fmt.Errorf("status %d", rep.Status)
		}
		out = append(out, err)
	}
	return out
}

// raw is what Redis holds at key's record: its value and TTL.
func (e *oomEnv) raw(key consumer.Key) (string, time.Duration) {
	e.t.Helper()
	ref := e.s.RecordKey(key)
	v, err := e.redis.c.Get(e.ctx, ref).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		e.t.Fatal(err)
	}
	return v, e.redis.c.PTTL(e.ctx, ref).Val()
}

func oomCases() []oomCase {
	none := func(*oomEnv, []consumer.Key) {}
	claimed := func(e *oomEnv, keys []consumer.Key) {
		for _, k := range keys {
			e.claim(e.s, k, "o", false)
		}
	}
	completed := func(e *oomEnv, keys []consumer.Key) {
		claimed(e, keys)
		for _, err := range e.settle(keys, true, false) {
			if err != nil {
				e.t.Fatal(err)
			}
		}
	}
	retry := func(e *oomEnv, keys []consumer.Key) {
		claimed(e, keys)
		e.settle(keys, false, false)
	}
	return []oomCase{
		{"begin a fresh key", none, func(e *oomEnv, keys []consumer.Key) []error {
			return e.begin(e.s, keys, false, consumer.StatusAcquired)
		}},
		{"begin a retry record", retry, func(e *oomEnv, keys []consumer.Key) []error {
			return e.begin(e.s, keys, false, consumer.StatusAcquired)
		}},
		{"begin over an expired lease (takeover)", func(e *oomEnv, keys []consumer.Key) {
			short := e.redis.store(e.t, consumer.WithLease(20*time.Millisecond))
			for _, k := range keys {
				e.claim(short, k, "o", false)
			}
			testenv.Eventually(e.t, 10*time.Second, "the claims' leases run out", func() bool {
				for _, k := range keys {
					if rec, err := e.s.Peek(e.ctx, k); err != nil || rec.LeaseUntil.After(rec.Now) {
						return false
					}
				}
				return true
			})
		}, func(e *oomEnv, keys []consumer.Key) []error {
			return e.begin(e.s, keys, false, consumer.StatusTakenOver)
		}},
		{"begin under the key's lock (takeover)", func(e *oomEnv, keys []consumer.Key) {
			for _, k := range keys {
				e.claim(e.s, k, "o", true)
			}
		}, func(e *oomEnv, keys []consumer.Key) []error {
			return e.begin(e.s, keys, true, consumer.StatusTakenOver)
		}},
		{"begin a retry record at max attempts", func(e *oomEnv, keys []consumer.Key) {
			retry(e, keys)
			retry(e, keys)
		}, func(e *oomEnv, keys []consumer.Key) []error {
			two := e.redis.store(e.t, consumer.WithMaxAttempts(2))
			return e.begin(two, keys, false, consumer.StatusExhausted)
		}},
		{"complete", claimed, func(e *oomEnv, keys []consumer.Key) []error { return e.settle(keys, true, false) }},
		{"complete a record with operator notes", func(e *oomEnv, keys []consumer.Key) {
			for _, k := range keys {
				e.claim(e.s, k, "dead", false)
			}
			e.change(keys, consumer.OpUnstick)
			claimed(e, keys)
		}, func(e *oomEnv, keys []consumer.Key) []error { return e.settle(keys, true, false) }},
		{"fail", claimed, func(e *oomEnv, keys []consumer.Key) []error { return e.settle(keys, false, false) }},
		{"fail for good", claimed, func(e *oomEnv, keys []consumer.Key) []error { return e.settle(keys, false, true) }},
		{"extend", claimed, func(e *oomEnv, keys []consumer.Key) []error { return e.s.Extend(e.ctx, e.owned(keys)) }},
		{"release", claimed, func(e *oomEnv, keys []consumer.Key) []error { return e.s.Release(e.ctx, e.owned(keys)) }},
		{"unstick", claimed, func(e *oomEnv, keys []consumer.Key) []error { return e.change(keys, consumer.OpUnstick) }},
		{"forget", completed, func(e *oomEnv, keys []consumer.Key) []error { return e.change(keys, consumer.OpForget) }},
		{"rerun", completed, func(e *oomEnv, keys []consumer.Key) []error { return e.change(keys, consumer.OpRerun) }},
	}
}

// At its memory limit Redis refuses every transition whole: each answers a store
// error (never a corrupt record) and changes nothing, on a call of two records;
// reads go on; once memory is freed, the same transition works.
func TestTransitionsRefusedByAFullRedis(t *testing.T) {
	f := newFullRedis(t)
	for _, tc := range oomCases() {
		t.Run(tc.name, func(t *testing.T) {
			e := &oomEnv{t: t, ctx: context.Background(), redis: f, claims: map[consumer.Key]consumer.ClaimReply{},
				s: f.store(t, consumer.WithLease(time.Hour))}
			keys := []consumer.Key{consumer.Key(tc.name + " 1"), consumer.Key(tc.name + " 2")}
			tc.setup(e, keys)
			type snap struct {
				v   string
				ttl time.Duration
			}
			before := make([]snap, len(keys))
			for i, k := range keys {
				before[i].v, before[i].ttl = e.raw(k)
			}
			if err := f.fill(e.ctx); err != nil {
				t.Fatal(err)
			}
			for i, err := range tc.act(e, keys) {
				if err := refusedStoreError(err); err != nil {
					t.Errorf("record %d at the memory limit: %v", i+1, err)
				}
			}
			for i, k := range keys {
				v, ttl := e.raw(k)
				if v != before[i].v || ttl > before[i].ttl {
					t.Errorf("record %d changed at the memory limit: %q (TTL %v) -> %q (TTL %v)", i+1, before[i].v, before[i].ttl, v, ttl)
				}
				if _, err := e.s.Peek(e.ctx, k); err != nil {
					t.Errorf("peek at the memory limit: %v", err)
				}
			}
			if err := f.free(e.ctx); err != nil {
				t.Fatal(err)
			}
			for i, err := range tc.act(e, keys) {
				if err != nil {
					t.Errorf("record %d once memory was freed: %v", i+1, err)
				}
			}
		})
	}
}

// refusedCompletions counts the complete calls Redis refused for memory, and
// closes first at the first.
type refusedCompletions struct {
	n     atomic.Int32
	first chan struct{}
}

func (h *refusedCompletions) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *refusedCompletions) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.see(cmd, err)
		return err
	}
}

func (h *refusedCompletions) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.see(cmd, cmd.Err())
		}
		return err
	}
}

// see counts cmd if it is a refused complete call (err is its error: a lone
// command's is set on it only after the hooks have run).
func (h *refusedCompletions) see(cmd redis.Cmder, err error) {
	args := cmd.Args()
	if len(args) > 1 && args[1] == lua.CompleteScript.Hash() && redis.HasErrorPrefix(err, "OOM") {
		if h.n.Add(1) == 1 {
			close(h.first)
		}
	}
}

// Redis fills up while a handler runs: its completion is refused, sent again
// while the claim is live, and stored once memory is freed. The handler runs
// once; the redelivery is a DUPLICATE with the stored result.
func TestFullRedisDuringAnExecution(t *testing.T) {
	f := newFullRedis(t)
	refused := &refusedCompletions{first: make(chan struct{})}
	f.c.AddHook(refused)
	s := f.store(t)
	ctx := context.Background()
	freed := make(chan error, 1)
	go func() {
		<-refused.first
		freed <- f.free(ctx)
	}()
	runs := 0
	charge := func(ctx context.Context) (string, error) {
		runs++
		if runs == 1 {
			if err := f.fill(ctx); err != nil { // other traffic takes Redis to its limit
				return "", consumer.Permanent(err)
			}
		}
		return "ch_1", nil
	}
	r := consumer.ExecuteIdempotently(ctx, s, "charge-1", []byte("p"), charge)
	if r.Outcome != consumer.Success || r.Err != nil || runs != 1 || refused.n.Load() == 0 {
		t.Fatalf("outcome %v (%v), handler runs %d, completions refused %d", r.Outcome, r.Err, runs, refused.n.Load())
	}
	if err := <-freed; err != nil {
		t.Fatal(err)
	}
	r = consumer.ExecuteIdempotently(ctx, s, "charge-1", []byte("p"), charge)
	if r.Outcome != consumer.Duplicate || r.Value != "ch_1" || runs != 1 {
		t.Fatalf("redelivery: outcome %v (%v), value %q, handler runs %d", r.Outcome, r.Err, r.Value, runs)
	}
}

// A completion refused for longer than the claim's lease is a retryable store
// error, never a corrupt record to dead-letter: the record stays started, and once
// memory is freed and its lease has run out the next delivery runs the handler
// again, the bound of a crash between a side effect and its completion.
func TestCompletionRefusedPastTheLease(t *testing.T) {
	f := newFullRedis(t)
	s := f.store(t, consumer.WithLease(time.Second))
	ctx := context.Background()
	runs := 0
	charge := func(ctx context.Context) (string, error) {
		runs++
		if runs == 1 {
			if err := f.fill(ctx); err != nil {
				return "", consumer.Permanent(err)
			}
		}
		return "ch_1", nil
	}
	r := consumer.ExecuteIdempotently(ctx, s, "charge-1", []byte("p"), charge)
	if err := refusedStoreError(r.Err); r.Outcome != consumer.Error || err != nil || r.Action() != consumer.Retry || runs != 1 {
		t.Fatalf("outcome %v, action %v, handler runs %d: %v", r.Outcome, r.Action(), runs, err)
	}
	rec, err := s.Peek(ctx, "charge-1")
	if err != nil || rec.State != "started" || rec.Attempts != 1 {
		t.Fatalf("record after the refused completion: %+v %v", rec, err)
	}
	if err := f.free(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the claim's lease runs out", func() bool {
		rec, err := s.Peek(ctx, "charge-1")
		return err == nil && !rec.LeaseUntil.After(rec.Now)
	})
	// The first claim was never counted (its completion never landed): the
	// redelivery takes it over as the same attempt.
	r = consumer.ExecuteIdempotently(ctx, s, "charge-1", []byte("p"), charge)
	if r.Outcome != consumer.Success || r.Attempt != 1 || runs != 2 {
		t.Fatalf("redelivery: outcome %v (%v), attempt %d, handler runs %d", r.Outcome, r.Err, r.Attempt, runs)
	}
}
