package lua

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/redis/go-redis/v9"
)

// Operator transitions (see operator.lua).
type OperatorOp byte

// The operator transitions.
const (
	// OpUnstick ends a started claim: the record becomes retry at fence+1 with the
	// abandoned attempt not counted, so the next delivery claims it at once and the
	// old owner, if alive, gets LEASE_LOST at its next renewal or settlement.
	OpUnstick OperatorOp = 'u'
	// OpForget leaves only the fence, the error history and the operator notes
	// (state forgotten): the next claim starts afresh above the fence.
	OpForget OperatorOp = 'f'
	// OpRerun makes a completed or failed record retry with no attempt counted: the
	// next delivery claims it with a whole attempt budget.
	OpRerun OperatorOp = 'r'
)

// OperatorCode is the operator script's verdict.
type OperatorCode int

// Operator script codes.
const (
	OperatorOK         OperatorCode = 1
	OperatorCorrupt    OperatorCode = 8
	OperatorNotFound   OperatorCode = 9
	OperatorWrongState OperatorCode = 10
	OperatorFenceMoved OperatorCode = 11
)

// OperateArgs are one operator transition's arguments.
type OperateArgs struct {
	Key       string
	Op        OperatorOp
	Now       int64         // unix seconds, the caller's clock: informational times only
	Fence     int64         // the fence the operator saw; 0: whatever the record holds
	Retention time.Duration // the least TTL that forget and rerun leave
	Note      string        // "<op> by <actor>: <reason>", cut to MaxNoteText bytes
}

// OperateReply is the operator script's answer.
type OperateReply struct {
	Code     OperatorCode
	State    int   // the record's state before (0 when not found or corrupt)
	Fence    int64 // the record's fence before
	NewFence int64 // and after
	// LeaseLeft is what a started record's lease had left before (on the server's clock).
	LeaseLeft time.Duration
}

// Operate runs one operator transition, atomically.
func (r *Runner) Operate(ctx context.Context, a OperateArgs) (OperateReply, error) {
	switch a.Op {
	case OpUnstick, OpForget, OpRerun:
	default:
		return OperateReply{}, fmt.Errorf("lua: operate: unknown op %q", a.Op)
	}
	note := consumer.CapText(a.Note, MaxNoteText)
	rep := r.exec(ctx, []call{{script: OperatorScript, keys: []string{a.Key},
		args: []any{string(a.Op), a.Now, a.Fence, a.Retention.Milliseconds(), note}}})[0]
	if rep.err != nil {
		return OperateReply{}, rep.err
	}
	row, ok := rep.val.([]any)
	if !ok || len(row) != 5 {
		return OperateReply{}, fmt.Errorf("lua: operate: malformed reply %v", rep.val)
	}
	var n [5]int64
	for i := range n {
		v, err := asInt(row[i])
		if err != nil {
			return OperateReply{}, fmt.Errorf("lua: operate: %w", err)
		}
		n[i] = v
	}
	return OperateReply{Code: OperatorCode(n[0]), State: int(n[1]), Fence: n[2], NewFence: n[3],
		LeaseLeft: time.Duration(n[4]) * time.Millisecond}, nil
}

// record builds a Record from a GET reply and a PTTL reply read at now.
func record(get *redis.StringCmd, pttl *redis.DurationCmd, now time.Time) (Record, error) {
	rec := Record{Now: now}
	v, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return rec, nil
	case err != nil && redis.HasErrorPrefix(err, "WRONGTYPE"):
		rec.Found, rec.Corrupt, rec.Reason, rec.TTL = true, true, "key holds a value that is not a string", -1
		return rec, nil
	case err != nil:
		return rec, err
	}
	ttl, err := pttl.Result()
	if err != nil {
		return rec, err
	}
	rec.Found, rec.Raw, rec.TTL = true, []byte(v), ttl
	if ttl < 0 {
		rec.TTL = -1
	}
	f, err := Decode(rec.Raw)
	if err != nil {
		rec.Corrupt, rec.Reason = true, strings.TrimPrefix(err.Error(), "lua: ")
		return rec, nil
	}
	rec.Fields = f
	if f.State == StateStarted && ttl >= 0 {
		rec.LeaseUntil = now.Add(ttl - f.Retention)
	}
	return rec, nil
}

// PeekMany reads the records at keys without changing them, in one round trip of
// plain GET and PTTL commands (a pipeline that go-redis splits per node on a
// cluster): nothing runs in Lua, so the server serves other clients between the
// commands. Record.Now is this process's clock; LeaseUntil is what the lease had
// left, counted from it.
func (r *Runner) PeekMany(ctx context.Context, keys []string) ([]Record, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	type cmds struct {
		gets  []*redis.StringCmd
		pttls []*redis.DurationCmd
	}
	c, err := within(r, ctx, func() cmds {
		pipe := r.c.Pipeline()
		out := cmds{make([]*redis.StringCmd, len(keys)), make([]*redis.DurationCmd, len(keys))}
		for i, k := range keys {
			out.gets[i] = pipe.Get(ctx, k)
			out.pttls[i] = pipe.PTTL(ctx, k)
		}
		_, _ = pipe.Exec(ctx)
		return out
	})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]Record, len(keys))
	for i := range keys {
		rec, err := record(c.gets[i], c.pttls[i], now)
		if err != nil {
			return nil, fmt.Errorf("lua: peek %q: %w", keys[i], err)
		}
		out[i] = rec
	}
	return out, nil
}

// ScannedRecord is one record a scan found: its Redis key and what it holds.
type ScannedRecord struct {
	Key string
	Record
}

// ScanPage is one step of a scan over every primary.
type ScanPage struct {
	Records []ScannedRecord
	// Next continues the scan; "" when every primary has been scanned.
	Next string
	// Node is the primary this step scanned (its address; "primary" for a client
	// of one server).
	Node string
}

// node is one primary a scan visits.
type node struct {
	name string
	c    *redis.Client
}

// nodes lists the primaries in a stable order: every master of a cluster, every
// live shard of a ring, or the one server of a plain or Sentinel client.
func (r *Runner) nodes(ctx context.Context) ([]node, error) {
	var out []node
	collect := func(_ context.Context, c *redis.Client) error {
		out = append(out, node{name: c.Options().Addr, c: c})
		return nil
	}
	var err error
	switch c := r.c.(type) {
	case *redis.Client:
		return []node{{name: "primary", c: c}}, nil
	case *redis.ClusterClient:
		var mu sync.Mutex
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return collect(ctx, n)
		})
	case *redis.Ring:
		var mu sync.Mutex
		err = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return collect(ctx, n)
		})
	default:
		return nil, fmt.Errorf("lua: scan: a %T cannot be scanned: use a *redis.Client, *redis.ClusterClient or *redis.Ring", r.c)
	}
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// Scan runs one step of a scan of the keys matching match: one SCAN ... MATCH
// match COUNT count on one primary, then one pipeline of GET and PTTL for the keys
// it returned, on that primary. cursor is "" to start, then the previous page's
// Next. Like SCAN, a scan returns every key that exists from its start to its end
// at least once, and may return one twice. A cursor names its primary: when the
// cluster's primaries change during a scan, the scan fails with a message to start
// it again.
func (r *Runner) Scan(ctx context.Context, cursor, match string, count int) (ScanPage, error) {
	nodes, err := r.nodes(ctx)
	if err != nil {
		return ScanPage{}, fmt.Errorf("lua: scan: list the primaries: %w", err)
	}
	if len(nodes) == 0 {
		return ScanPage{}, errors.New("lua: scan: no primary is up")
	}
	at, pos := 0, uint64(0)
	if cursor != "" {
		i := strings.LastIndexByte(cursor, '|')
		if i < 0 {
			return ScanPage{}, fmt.Errorf("lua: scan: cursor %q is not one a scan returned", cursor)
		}
		pos, err = strconv.ParseUint(cursor[i+1:], 10, 64)
		if err != nil {
			return ScanPage{}, fmt.Errorf("lua: scan: cursor %q is not one a scan returned", cursor)
		}
		at = sort.Search(len(nodes), func(j int) bool { return nodes[j].name >= cursor[:i] })
		if at == len(nodes) || nodes[at].name != cursor[:i] {
			return ScanPage{}, fmt.Errorf("lua: scan: %s is no longer a primary: start the scan again", cursor[:i])
		}
	}
	n := nodes[at]
	type step struct {
		keys []string
		next uint64
		recs []Record
		err  error
	}
	st, err := within(r, ctx, func() (s step) {
		s.keys, s.next, s.err = n.c.Scan(ctx, pos, match, int64(count)).Result()
		if s.err != nil || len(s.keys) == 0 {
			return s
		}
		pipe := n.c.Pipeline()
		gets := make([]*redis.StringCmd, len(s.keys))
		pttls := make([]*redis.DurationCmd, len(s.keys))
		for i, k := range s.keys {
			gets[i], pttls[i] = pipe.Get(ctx, k), pipe.PTTL(ctx, k)
		}
		_, _ = pipe.Exec(ctx)
		now := time.Now()
		s.recs = make([]Record, len(s.keys))
		for i := range s.keys {
			if s.recs[i], s.err = record(gets[i], pttls[i], now); s.err != nil {
				return s
			}
		}
		return s
	})
	if err == nil {
		err = st.err
	}
	if err != nil {
		return ScanPage{}, fmt.Errorf("lua: scan %s: %w", n.name, err)
	}
	page := ScanPage{Node: n.name, Records: make([]ScannedRecord, 0, len(st.keys))}
	for i, k := range st.keys {
		if st.recs[i].Found { // expired between SCAN and GET: gone
			page.Records = append(page.Records, ScannedRecord{Key: k, Record: st.recs[i]})
		}
	}
	switch {
	case st.next != 0:
		page.Next = n.name + "|" + strconv.FormatUint(st.next, 10)
	case at+1 < len(nodes):
		page.Next = nodes[at+1].name + "|0"
	}
	return page, nil
}

// Nodes names the primaries a scan visits, in its order.
func (r *Runner) Nodes(ctx context.Context) ([]string, error) {
	nodes, err := r.nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.name
	}
	return out, nil
}

// KeyCount is the number of keys on every primary (DBSIZE), all programs' keys.
func (r *Runner) KeyCount(ctx context.Context) (int64, error) {
	nodes, err := r.nodes(ctx)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, n := range nodes {
		v, err := within(r, ctx, func() *redis.IntCmd { return n.c.DBSize(ctx) })
		if err == nil {
			err = v.Err()
		}
		if err != nil {
			return 0, fmt.Errorf("lua: dbsize %s: %w", n.name, err)
		}
		total += v.Val()
	}
	return total, nil
}
