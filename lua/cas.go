package lua

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The server's own compare-and-set. Redis 8.4 and Valkey 8.1 added a condition
// to SET: SET key value IFEQ current writes value only when the key holds exactly
// current; a missing key or another value is left alone (the reply is nil), and a
// key of another type answers WRONGTYPE. The completion of a fresh claim (fence
// 1, attempt 1: what the engine claims with one SET NX) knows the started record
// its claim wrote, byte for byte, so on such a server it is one plain command,
// SET key completed IFEQ started KEEPTTL (PX the retention when the lease may
// have run out, as the complete script's PEXPIRE), pipelined with the rest of the
// batch, and no script runs. The value written is the one the complete script's
// fast path writes in the same case, and the TTL the same.
//
// A completion whose SET IFEQ wrote nothing (the record was taken over, has
// operator notes, was marked counted or locked, is already completed by a call
// sent before, or is not a record; or the server refused the command: WRONGTYPE,
// OOM when it is full) goes to the complete script in a second round trip, which
// decides it as it decides every other completion (and answers a full Redis's
// refusal as the call's error). Each SET IFEQ is made or refused on its own, so a
// batch's completions are answered one by one, each exactly.
//
// Which servers get which path: the Runner asks the server whether SET takes
// IFEQ (COMMAND DOCS SET names its IFEQ token) when it loads the scripts (Load, on
// every primary of a cluster and every shard of a ring: all must have it), or
// else with the first Settle call, in that call's own round trip; until the
// answer arrives every completion goes to the script. Redis 8.4 and later and
// Valkey 8.1 and later get the native path; Redis 6.2 to 8.2 and Valkey 7.2 and
// 8.0 (and a server that refuses COMMAND DOCS, as some managed services do) keep
// the script. A server that refuses SET IFEQ all the same (a syntax error,
// having written nothing: a failover to an older server, a cluster whose nodes
// differ) has those records completed by the script in the same Settle call, and
// turns the native path off; after casRetry the Runner asks again, so that a
// server upgraded, or a failover to a newer one, gets the native path back.

// casRetry is how long the Runner sends every completion to the script after a
// server said it has no SET IFEQ, before it asks again.
const casRetry = 10 * time.Minute

// What the Runner knows of SET IFEQ on its servers (Runner.cas).
const (
	casUnknown int64 = iota // not asked: the next Settle asks
	casAsking               // a Settle's question is in flight
	casYes                  // the servers have it
	// any larger value: they do not, until that time (unix nanoseconds)
)

// casMode is what the next Settle does: use SET IFEQ, ask whether the servers
// have it (when it takes the question on), or neither.
func (r *Runner) casMode() (use, ask bool) {
	switch s := r.cas.Load(); {
	case s == casYes:
		return true, false
	case s == casAsking:
		return false, false
	case s == casUnknown || time.Now().UnixNano() >= s:
		return false, r.cas.CompareAndSwap(s, casAsking)
	}
	return false, false
}

// casLearn records the answer of a question: err is its reply's error, or the
// bound's when the reply did not arrive (then the next Settle asks again).
func (r *Runner) casLearn(has bool, err error) {
	var refused redis.Error
	switch {
	case has:
		r.cas.Store(casYes)
	case err == nil || errors.As(err, &refused) && !errors.Is(err, redis.Nil):
		r.cas.Store(time.Now().Add(casRetry).UnixNano())
	default:
		r.cas.Store(casUnknown)
	}
}

// casQuestion is the command that asks a server whether SET takes IFEQ.
func casQuestion(ctx context.Context) *redis.Cmd {
	return redis.NewCmd(ctx, "command", "docs", "set")
}

// casAnswer reads a casQuestion's reply: true when it names the IFEQ token.
func casAnswer(c *redis.Cmd) (bool, error) {
	v, err := c.Result()
	if err != nil {
		return false, err
	}
	return hasToken(v, "IFEQ", 0), nil
}

// hasToken reports whether the COMMAND DOCS reply v (nested arrays in RESP2, maps
// in RESP3) holds the string token as a whole value.
func hasToken(v any, token string, depth int) bool {
	if depth > 8 {
		return false
	}
	switch x := v.(type) {
	case string:
		return strings.EqualFold(x, token)
	case []any:
		for _, e := range x {
			if hasToken(e, token, depth+1) {
				return true
			}
		}
	case map[any]any:
		for _, e := range x {
			if hasToken(e, token, depth+1) {
				return true
			}
		}
	case map[string]any:
		for _, e := range x {
			if hasToken(e, token, depth+1) {
				return true
			}
		}
	}
	return false
}

// casCommands are the SET IFEQ commands that complete the items idx names (each
// with exactLen > 0), their values made in one allocation.
func casCommands(ctx context.Context, a SettleArgs, b SettleBatch, idx []int) []redis.Cmder {
	n := len(idx)
	size := 0
	for _, i := range idx {
		it := b.Item(i)
		size += exactLen(a, &it) + headerLen + fpLen + len(it.Result) + len(it.Dropped)
	}
	var sb strings.Builder
	sb.Grow(size)
	ends := make([]int, 2*n)
	var rec []byte
	for j, i := range idx {
		it := b.Item(i)
		rec = AppendCompleted(rec[:0], it.Fence, it.Attempts, it.Fingerprint, it.Created, a.Now, it.Result, it.Dropped)
		sb.Write(rec)
		ends[2*j] = sb.Len()
		rec = AppendStarted(rec[:0], it.Owner, it.Fingerprint, false, false, a.Retention, it.Created)
		sb.Write(rec)
		ends[2*j+1] = sb.Len()
	}
	all := sb.String()
	var ret any = a.Retention.Milliseconds() // boxed once for every late command
	args := make([]any, 7*n)
	// The commands' strings, passed by pointer: go-redis takes *string, and a
	// pointer goes into an interface without an allocation of its own.
	strs := make([]string, 3*n)
	cmds := make([]redis.Cmder, n)
	start := 0
	for j, i := range idx {
		strs[3*j], strs[3*j+1], strs[3*j+2] = b.Item(i).Key, all[start:ends[2*j]], all[ends[2*j]:ends[2*j+1]]
		start = ends[2*j+1]
		it := b.Item(i)
		cmdArgs := args[7*j : 7*j+7 : 7*j+7]
		cmdArgs[0], cmdArgs[1], cmdArgs[2], cmdArgs[3], cmdArgs[4] = "set", &strs[3*j], &strs[3*j+1], "ifeq", &strs[3*j+2]
		if it.Late { // the lease may have run out: the retention starts afresh
			cmdArgs[5], cmdArgs[6] = "px", ret
		} else {
			cmdArgs[5], cmdArgs = "keepttl", cmdArgs[:6]
		}
		cmds[j] = redis.NewStatusCmd(ctx, cmdArgs...)
	}
	return cmds
}

// casAnswers answers the completions sent as cmds (the items idx names) and
// returns those the complete script must decide. bound is the round trip's
// error when its replies did not arrive in time (cmds are then not read: the
// round trip may still be running).
func (r *Runner) casAnswers(b SettleBatch, idx []int, cmds []redis.Cmder, bound error) (again []int) {
	for j, i := range idx {
		if bound != nil {
			b.Answer(i, AckReply{Err: bound})
			continue
		}
		err := cmds[j].Err()
		var refused redis.Error
		switch {
		case err == nil:
			b.Answer(i, AckReply{Ack: AckOK})
		case errors.Is(err, redis.Nil): // not the started record its claim wrote: nothing written
			again = append(again, i)
		case errors.As(err, &refused): // the server refused the command, and wrote nothing
			if redis.HasErrorPrefix(err, "syntax error") { // a server without SET IFEQ
				r.cas.Store(time.Now().Add(casRetry).UnixNano())
			}
			again = append(again, i)
		default:
			b.Answer(i, AckReply{Err: err})
		}
	}
	return again
}
