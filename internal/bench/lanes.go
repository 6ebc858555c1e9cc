package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/lua"
	"github.com/redis/go-redis/v9"
)

var (
	ns      = uuid.MustParse("0b7e3a52-7c0e-4d3f-9a39-6a3c2b1d4e5f")
	payload = []byte(`{"order":42,"amount":1999}`)
	lease   = 30 * time.Second
	ret     = 24 * time.Hour
)

// key is the n-th key of a lane's slice: a 36-character UUID, as NewKey makes.
func key(lane, tag string, n int) consumer.Key {
	return consumer.NewKey(ns, lane, tag, strconv.Itoa(n))
}

// keys makes a slice's keys before it is measured: making them is the caller's
// business, not the path's.
func keys(lane, tag string, n int) []consumer.Key {
	out := make([]consumer.Key, n)
	for i := range out {
		out[i] = key(lane, tag, i)
	}
	return out
}

// recordKeys is keys as the store names them in Redis.
func (r *rig) recordKeys(ks []consumer.Key) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = r.store.RecordKey(k)
	}
	return out
}

// floorLane: SET NX PX then SET KEEPTTL per message, B per pipeline.
func (r *rig) floorLane(all []string) error {
	for start := 0; start < len(all); start += r.b {
		keys := all[start : start+r.b]
		pipe := r.client.Pipeline()
		for _, k := range keys {
			pipe.SetArgs(r.ctx, k, "started-by-worker-1", redis.SetArgs{Mode: "NX", TTL: lease + ret})
		}
		if _, err := pipe.Exec(r.ctx); err != nil {
			return err
		}
		for _, k := range keys {
			pipe.SetArgs(r.ctx, k, "{}", redis.SetArgs{KeepTTL: true})
		}
		if _, err := pipe.Exec(r.ctx); err != nil {
			return err
		}
	}
	return nil
}

// The seed-002 protocol: a hash per key; acquire answers acquired, locked or
// completed (with the stored response); release stores the response and the TTL.
var (
	seedAcquire = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then
  local status = redis.call('HGET', KEYS[1], 'status')
  if status == 'completed' then
    return {'completed', redis.call('HGET', KEYS[1], 'response_code'), redis.call('HGET', KEYS[1], 'response_body')}
  end
  return {'locked'}
end
redis.call('HSET', KEYS[1], 'status', 'in_progress', 'request_id', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[1])
return {'acquired'}`)
	seedRelease = redis.NewScript(`
redis.call('HSET', KEYS[1], 'status', 'completed', 'response_code', ARGV[1], 'response_body', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 'OK'`)
)

func (r *rig) loadSeed() error {
	for _, s := range []*redis.Script{seedAcquire, seedRelease} {
		if err := s.Load(r.ctx, r.client).Err(); err != nil {
			return err
		}
	}
	return nil
}

func (r *rig) seedLane(all []string) error {
	for i := range all {
		k := all[i : i+1]
		v, err := seedAcquire.EvalSha(r.ctx, r.client, k, 60, "worker-1").Slice()
		if err != nil {
			return err
		}
		if v[0] != "acquired" {
			return fmt.Errorf("seed acquire: %v", v)
		}
		if err := seedRelease.EvalSha(r.ctx, r.client, k, 200, "{}", 86400).Err(); err != nil {
			return err
		}
	}
	return nil
}

// rawLane: idemkit's begin and complete scripts (or SET IFEQ, where the server
// has it) with pre-built arguments.
func (r *rig) rawLane(all []string) error {
	run := r.runner
	items := make([]lua.BeginItem, r.b)
	reps := make([]lua.BeginReply, r.b)
	settle := make([]lua.SettleItem, r.b)
	acks := make([]lua.AckReply, r.b)
	fps := make([][16]byte, r.b)
	owners := make([]string, r.b)
	for i := range owners {
		owners[i] = "worker-1-" + strconv.Itoa(i) // one batch at a time: unique among live claims
	}
	fp := [16]byte(consumer.FingerprintOf(payload))
	for start := 0; start < len(all); start += r.b {
		now := time.Now().Unix()
		for i := range items {
			fps[i] = fp
			items[i] = lua.BeginItem{Key: all[start+i], Owner: owners[i], Fingerprint: &fps[i]}
		}
		run.Begin(r.ctx, lua.BeginArgs{Lease: lease, Retention: ret, MaxAttempts: 5, Now: now}, lua.Claims{Items: items, Replies: reps})
		for i, rep := range reps {
			if rep.Err != nil || rep.Code != lua.Acquired {
				return fmt.Errorf("raw begin: %+v", rep)
			}
			settle[i] = lua.SettleItem{Key: items[i].Key, Owner: items[i].Owner, Fence: 1, Attempts: 1, Created: now,
				Fingerprint: &fps[i], Complete: true, Result: []byte("{}")}
		}
		run.Settle(r.ctx, lua.SettleArgs{MaxAttempts: 5, Now: now, Retention: ret}, lua.Settlements{Items: settle, Replies: acks})
		for _, a := range acks {
			if a.Err != nil || a.Ack != lua.AckOK {
				return fmt.Errorf("raw complete: %+v", a)
			}
		}
	}
	return nil
}

func (r *rig) singleLane(all []consumer.Key) error {
	noop := func(context.Context) (struct{}, error) { return struct{}{}, nil }
	for i, k := range all {
		res := consumer.ExecuteIdempotently(r.ctx, r.store, k, payload, noop)
		if res.Outcome != consumer.Success {
			return fmt.Errorf("message %d: %v %v", i, res.Outcome, res.Err)
		}
	}
	return nil
}

// batchLane runs all through ExecuteBatch, B at a time, split over flights goroutines.
func (r *rig) batchLane(all []consumer.Key, flights int) error {
	h := func(context.Context, int, consumer.BatchItem) (struct{}, error) { return struct{}{}, nil }
	errs := make(chan error, flights)
	var wg sync.WaitGroup
	for f := 0; f < flights; f++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			items := make([]consumer.BatchItem, r.b)
			for start := f * r.b; start < len(all); start += flights * r.b {
				for i := range items {
					items[i] = consumer.BatchItem{Key: all[start+i], Payload: payload}
				}
				for i, res := range consumer.ExecuteBatch(r.ctx, r.counted, items, h) {
					if res.Outcome != consumer.Success {
						errs <- fmt.Errorf("message %d: %v %v", start+i, res.Outcome, res.Err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// slowBatchLane runs all through ExecuteBatch, B at a time with B handlers at
// once, each handler taking 2 ms.
func (r *rig) slowBatchLane(all []consumer.Key) error {
	h := func(context.Context, int, consumer.BatchItem) (struct{}, error) {
		time.Sleep(2 * time.Millisecond)
		return struct{}{}, nil
	}
	items := make([]consumer.BatchItem, r.b)
	for start := 0; start < len(all); start += r.b {
		for i := range items {
			items[i] = consumer.BatchItem{Key: all[start+i], Payload: payload}
		}
		for i, res := range consumer.ExecuteBatch(r.ctx, r.counted, items, h, consumer.WithConcurrency(r.b)) {
			if res.Outcome != consumer.Success {
				return fmt.Errorf("message %d: %v %v", start+i, res.Outcome, res.Err)
			}
		}
	}
	return nil
}

// pipelineLane runs all through one consumer.Pipeline with its defaults but
// WithMaxBatch(B): claims and completions batched from whatever is waiting, two
// calls of each in flight. Each handler takes pause (0: a no-op).
func (r *rig) pipelineLane(all []consumer.Key, pause time.Duration) error {
	p, err := consumer.NewPipeline[struct{}](r.ctx, r.counted, consumer.WithMaxBatch(r.b))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var failed error
	var mu sync.Mutex
	wg.Add(len(all))
	run := func(context.Context) (struct{}, error) { return struct{}{}, nil }
	if pause > 0 {
		run = func(context.Context) (struct{}, error) { time.Sleep(pause); return struct{}{}, nil }
	}
	done := func(res consumer.Result[struct{}]) {
		if res.Outcome != consumer.Success {
			mu.Lock()
			failed = fmt.Errorf("%s: %v %v", res.Key, res.Outcome, res.Err)
			mu.Unlock()
		}
		wg.Done()
	}
	for _, k := range all {
		if err := p.Submit(r.ctx, consumer.PipelineItem[struct{}]{Key: k, Payload: payload, Run: run, Done: done}); err != nil {
			return err
		}
	}
	wg.Wait()
	if err := p.Shutdown(r.ctx); err != nil {
		return err
	}
	return failed
}

// callCounter counts the claim and settle calls of the stores it observes.
type callCounter struct{ claims, settles atomic.Int64 }

var (
	_ consumer.ClaimHook  = (*callCounter)(nil)
	_ consumer.SettleHook = (*callCounter)(nil)
)

func (c *callCounter) OnClaim(consumer.ClaimEvent)   { c.claims.Add(1) }
func (c *callCounter) OnSettle(consumer.SettleEvent) { c.settles.Add(1) }

func (c *callCounter) load() callCount {
	return callCount{claims: c.claims.Load(), settles: c.settles.Load()}
}

// callCount is a lane's claim and settle calls, summed over its slices.
type callCount struct{ claims, settles int64 }

func (c *callCount) add(now, before callCount) {
	c.claims += now.claims - before.claims
	c.settles += now.settles - before.settles
}
