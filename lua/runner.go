package lua

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// maxRecordsPerCall bounds how many records one script call touches, so one batch
// never holds the Redis event loop for long.
const maxRecordsPerCall = 512

type grouping int

const (
	groupNone grouping = iota // one server: every record may go in one call
	groupSlot                 // Redis Cluster: one call per hash slot
	groupTag                  // Ring and unknown clients: one call per hash tag
)

// Runner runs the scripts against one go-redis client. It is safe for concurrent use.
type Runner struct {
	c    redis.UniversalClient
	mode grouping
	// honours: the client bounds its socket I/O by the context's deadline
	// (ContextTimeoutEnabled), so a call needs no goroutine of its own to be bounded.
	honours bool
	// cas: what the Runner knows of SET IFEQ on its servers (casUnknown, casAsking,
	// casYes, or until when it does without; see cas.go).
	cas atomic.Int64
}

// NewRunner returns a Runner for c: a *redis.Client (single server or Sentinel
// failover), a *redis.ClusterClient or a *redis.Ring. Records are grouped into calls
// so that all keys of one call share a hash slot wherever the client shards.
func NewRunner(c redis.UniversalClient) *Runner {
	r := &Runner{c: c, mode: groupTag}
	switch cc := c.(type) {
	case *redis.Client:
		r.mode, r.honours = groupNone, cc.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		r.mode, r.honours = groupSlot, cc.Options().ContextTimeoutEnabled
	case *redis.Ring:
		r.honours = cc.Options().ContextTimeoutEnabled
	}
	return r
}

// Load loads every script (on every primary of a cluster, on every shard of a
// ring) so that the first calls need no reload, and asks each of those servers
// whether SET takes IFEQ (see cas.go).
func (r *Runner) Load(ctx context.Context) error {
	err, berr := within(r, ctx, func() error {
		for _, s := range All() {
			if err := r.load(ctx, s); err != nil {
				return err
			}
		}
		r.casLearn(r.askEach(ctx))
		return nil
	})
	if berr != nil {
		return berr
	}
	return err
}

// load loads one script wherever a call may run: a ClusterClient already sends
// SCRIPT LOAD to every primary, but a Ring sends it to one shard only.
func (r *Runner) load(ctx context.Context, s *Script) error {
	if ring, ok := r.c.(*redis.Ring); ok {
		return ring.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.ScriptLoad(ctx, s.src).Err()
		})
	}
	return r.c.ScriptLoad(ctx, s.src).Err()
}

// askEach asks every primary of a cluster, every shard of a ring, or the one
// server whether SET takes IFEQ: true when all of them do.
func (r *Runner) askEach(ctx context.Context) (bool, error) {
	var mu sync.Mutex
	all, first := true, error(nil)
	ask := func(ctx context.Context, c *redis.Client) error {
		q := casQuestion(ctx)
		_ = c.Process(ctx, q)
		has, err := casAnswer(q)
		mu.Lock()
		defer mu.Unlock()
		all = all && has
		if first == nil {
			first = err
		}
		return nil
	}
	switch c := r.c.(type) {
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, ask); err != nil {
			return false, err
		}
	case *redis.Ring:
		if err := c.ForEachShard(ctx, ask); err != nil {
			return false, err
		}
	default:
		q := casQuestion(ctx)
		_ = r.c.Process(ctx, q)
		return casAnswer(q)
	}
	return all, first
}

type call struct {
	script *Script
	keys   []string
	args   []any
	// buf, when set, holds keys' and args' storage, taken from callBufs: it goes
	// back once the call's reply has been read (see release).
	buf *callBuf
}

// callBuf is the reusable storage of one script call: its packed argument, its
// keys, and the EVALSHA command's arguments. A call's buffers go back to
// callBufs only when its round trip ended with the replies read: go-redis no
// longer holds its arguments then. A call given up at the caller's bound may
// still be on its way (within), so its buffers are left to the collector.
type callBuf struct {
	blob []byte
	keys []string
	cmd  []any
}

var callBufs = sync.Pool{New: func() any { return new(callBuf) }}

// newCallBuf is a callBuf with room for n keys and a blob of size bytes.
func newCallBuf(n, size int) *callBuf {
	b := callBufs.Get().(*callBuf)
	if cap(b.blob) < size {
		b.blob = make([]byte, 0, size)
	}
	if cap(b.keys) < n {
		b.keys = make([]string, n)
	}
	b.blob, b.keys = b.blob[:0], b.keys[:n]
	return b
}

// maxPooled bounds the buffers kept for reuse, so that one enormous batch does
// not pin its memory.
const maxPooled = 1 << 20

// release gives back the buffers of calls whose round trip ended (bound nil).
func release(calls []call, bound error) {
	if bound != nil {
		return
	}
	for i := range calls {
		b := calls[i].buf
		if b == nil {
			continue
		}
		calls[i].buf = nil
		if cap(b.blob) > maxPooled {
			continue
		}
		clear(b.keys[:cap(b.keys)])
		clear(b.cmd[:cap(b.cmd)])
		callBufs.Put(b)
	}
}

// evalCmd is the EVALSHA (or, with the source, EVAL) command of c. The keys go
// by pointer: a pointer takes no allocation of its own to become an argument.
func evalCmd(ctx context.Context, name, payload string, c *call) *redis.Cmd {
	n := 3 + len(c.keys) + len(c.args)
	var args []any
	if c.buf != nil {
		if cap(c.buf.cmd) < n {
			c.buf.cmd = make([]any, n)
		}
		args = c.buf.cmd[:n]
	} else {
		args = make([]any, n)
	}
	args[0], args[1], args[2] = name, payload, len(c.keys)
	for i := range c.keys {
		args[3+i] = &c.keys[i]
	}
	copy(args[3+len(c.keys):], c.args)
	cmd := redis.NewCmd(ctx, args...)
	if len(c.keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

type reply struct {
	val any
	err error
}

// groups splits the indexes 0..n-1 of records (key gives each one's key) into call
// groups, each in input order and at most maxRecordsPerCall long.
func (r *Runner) groups(n int, key func(i int) string) [][]int {
	var out [][]int
	if r.mode == groupNone {
		for lo := 0; lo < n; lo += maxRecordsPerCall {
			hi := min(lo+maxRecordsPerCall, n)
			g := make([]int, 0, hi-lo)
			for i := lo; i < hi; i++ {
				g = append(g, i)
			}
			out = append(out, g)
		}
		return out
	}
	at := make(map[any]int)
	for i := 0; i < n; i++ {
		k := key(i)
		var id any = HashTag(k)
		if r.mode == groupSlot {
			id = Slot(k)
		}
		gi, ok := at[id]
		if !ok || len(out[gi]) >= maxRecordsPerCall {
			gi = len(out)
			at[id] = gi
			out = append(out, nil)
		}
		out[gi] = append(out[gi], i)
	}
	return out
}

// exec runs calls in one round trip, bounded as within says.
func (r *Runner) exec(ctx context.Context, calls []call) []reply {
	out, _ := r.execWith(ctx, calls, nil)
	return out
}

// execWith is exec with plain commands, extra, sent first in the same round trip;
// each carries its own reply. bound is within's error when the replies did not
// arrive in time: every reply then carries it, and extra must not be read.
func (r *Runner) execWith(ctx context.Context, calls []call, extra []redis.Cmder) (out []reply, bound error) {
	out, bound = within(r, ctx, func() []reply { return r.run(ctx, calls, extra) })
	if bound != nil {
		out = make([]reply, len(calls))
		for i := range out {
			out[i].err = bound
		}
	}
	return out, bound
}

// within runs a round trip f and waits for it no longer than ctx allows, whether or
// not the client honours context deadlines on its sockets. go-redis does with
// Options.ContextTimeoutEnabled, and then f runs directly: its commands fail with
// the context's error at the bound. Otherwise f runs in a goroutine of its own:
// when ctx is done first, within returns a *NoReplyError at once and f finishes in
// the background, its result dropped. Either way the commands may have run on the
// server.
func within[R any](r *Runner, ctx context.Context, f func() R) (R, error) {
	if r.honours || ctx.Done() == nil {
		return f(), nil
	}
	done := make(chan R, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v, nil
	case <-ctx.Done():
		select {
		case v := <-done: // the replies arrived as the bound passed: keep them
			return v, nil
		default:
		}
	}
	var zero R
	return zero, &NoReplyError{Cause: context.Cause(ctx)}
}

// NoReplyError says a call's reply did not arrive before the caller's bound (its
// context's deadline or cancellation). The call may still have run on the server.
type NoReplyError struct{ Cause error }

func (e *NoReplyError) Error() string {
	return "lua: no reply before the call's bound: " + e.Cause.Error()
}

// Unwrap returns the context's cause (context.DeadlineExceeded for a deadline).
func (e *NoReplyError) Unwrap() error { return e.Cause }

// run runs calls and extra in one round trip (one pipeline; a single command goes
// alone). Calls answered NOSCRIPT did not run, so they are sent again, once, with
// the script's source (EVAL), which no concurrent SCRIPT FLUSH can refuse; the
// scripts are loaded again for the calls that follow.
func (r *Runner) run(ctx context.Context, calls []call, extra []redis.Cmder) []reply {
	out := make([]reply, len(calls))
	switch {
	case len(calls) == 0 && len(extra) == 0:
		return out
	case len(calls) == 1 && len(extra) == 0:
		c := &calls[0]
		cmd := evalCmd(ctx, "evalsha", c.script.Hash(), c)
		_ = r.c.Process(ctx, cmd)
		v, err := cmd.Result()
		if isNoScript(err) {
			cmd = evalCmd(ctx, "eval", c.script.src, c)
			_ = r.c.Process(ctx, cmd)
			v, err = cmd.Result()
		}
		out[0] = reply{v, err}
		return out
	case len(calls) == 0 && len(extra) == 1:
		_ = r.c.Process(ctx, extra[0]) // the command carries its own error
		return out
	}
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	for round := 0; round == 0 || len(pending) > 0; round++ {
		pipe := r.c.Pipeline()
		if round == 0 {
			for _, c := range extra {
				_ = pipe.Process(ctx, c)
			}
		}
		cmds := make([]*redis.Cmd, len(pending))
		for j, i := range pending {
			c := &calls[i]
			if round == 0 {
				cmds[j] = evalCmd(ctx, "evalsha", c.script.Hash(), c)
			} else { // with the source: a SCRIPT FLUSH in between cannot refuse it
				cmds[j] = evalCmd(ctx, "eval", c.script.src, c)
			}
			_ = pipe.Process(ctx, cmds[j])
		}
		_, _ = pipe.Exec(ctx) // every command carries its own error
		var again []int
		load := make(map[*Script]bool)
		for j, i := range pending {
			v, err := cmds[j].Result()
			if isNoScript(err) && round == 0 {
				again = append(again, i)
				load[calls[i].script] = true
				continue
			}
			out[i] = reply{v, err}
		}
		for s := range load {
			_ = r.load(ctx, s) // for the calls after this one; the retry sends the source
		}
		pending = again
	}
	return out
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
