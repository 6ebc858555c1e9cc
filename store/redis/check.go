package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idemkit/consumer"
	goredis "github.com/redis/go-redis/v9"
)

// EvictionCheck says what a Store does about a Redis that may evict its
// records. Records all carry a TTL, so every maxmemory-policy but noeviction
// (allkeys-*, volatile-*) evicts them once maxmemory is reached, and an evicted
// completed record runs its handler again.
type EvictionCheck int

// Eviction checks.
const (
	// EvictionWarn logs a warning (the default).
	EvictionWarn EvictionCheck = iota
	// EvictionRefuse makes NewStore and Check fail with ErrInvalidConfig.
	EvictionRefuse
	// EvictionIgnore skips the check, and the start-up inspection with it.
	EvictionIgnore
)

// WithEvictionCheck sets what a Store does when a Redis node may evict
// records (maxmemory set and maxmemory-policy other than noeviction): warn, refuse,
// or not look. Default EvictionWarn. The memory store ignores it.
func WithEvictionCheck(c EvictionCheck) consumer.Option {
	return consumer.StoreSetting(evictionKey{}, c)
}

// evictionKey carries WithEvictionCheck's value in the store's Settings.
type evictionKey struct{}

// evictionCheck reads WithEvictionCheck's value from s: EvictionWarn unless set.
func evictionCheck(s consumer.Settings) (EvictionCheck, error) {
	c, _ := s.StoreSetting(evictionKey{}).(EvictionCheck)
	if c < EvictionWarn || c > EvictionIgnore {
		return c, configError("eviction check %d: WithEvictionCheck takes EvictionWarn, EvictionRefuse or EvictionIgnore", c)
	}
	return c, nil
}

// startupCheckTimeout bounds the inspection NewStore makes.
const startupCheckTimeout = time.Second

// nodeReport is what the inspection found on one Redis node.
type nodeReport struct {
	addr      string
	err       error // the node did not answer
	configErr error // it answered, but CONFIG GET was refused (managed services rename it)
	policy    string
	maxmemory int64
	aof       bool
	save      string
}

func (n nodeReport) evicts() bool {
	return n.configErr == nil && n.maxmemory > 0 && n.policy != "noeviction"
}

func (n nodeReport) persists() bool { return n.aof || strings.TrimSpace(n.save) != "" }

// Check verifies that the store can do its job, for start-up and readiness
// probes: every Redis node (every primary of a cluster, every shard of a ring)
// answers, the scripts are loaded, and no node may evict records. It returns an
// error matching ErrStoreUnavailable that names the node that did not answer and
// what to check, or, under WithEvictionCheck(EvictionRefuse), ErrInvalidConfig
// naming the node whose maxmemory-policy evicts records. Other findings (an
// evicting policy under EvictionWarn, no persistence) are logged at Warn, once
// per store. The call is bounded by WithCallTimeout.
func (r *Store) Check(ctx context.Context) error {
	if r == nil {
		return errNilStore
	}
	ctx, cancel := r.bound(ctx)
	defer cancel()
	reports := inspect(ctx, r.client)
	for _, n := range reports {
		if n.err != nil {
			return &consumer.StoreError{Op: "check", Err: fmt.Errorf("the Redis node at %s does not answer: %w; check the address in "+
				"the client's options, that the server runs, and that this host may reach it", n.addr, n.err)}
		}
	}
	if r.eviction != EvictionIgnore {
		if err := r.judge(reports); err != nil {
			return err
		}
	}
	return r.Load(ctx)
}

// startupCheck is NewStore's bounded inspection: an unreachable Redis is only
// logged (workers may start before it; calls fail closed until it answers).
func (r *Store) startupCheck() error {
	if r.eviction == EvictionIgnore {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(startupCheckTimeout, r.s.CallTimeout))
	defer cancel()
	reports := inspect(ctx, r.client)
	for _, n := range reports {
		if n.err != nil {
			r.s.Logger.Warn("consumer: Redis does not answer at start-up; claims fail closed until it does",
				"addr", n.addr, "err", n.err)
		}
	}
	return r.judge(reports)
}

// judge logs or refuses what the reports found.
func (r *Store) judge(reports []nodeReport) error {
	for _, n := range reports {
		switch {
		case n.err != nil:
		case n.configErr != nil:
			r.warnOnce("config:"+n.addr, "consumer: could not read the Redis configuration; make sure "+
				"maxmemory-policy is noeviction and persistence is on", slogArgs(n, "err", n.configErr)...)
		default:
			if n.evicts() {
				if r.eviction == EvictionRefuse {
					return configError("Redis at %s has maxmemory %d with maxmemory-policy %s: it evicts idemkit "+
						"records, whose handlers would then run again; set maxmemory-policy noeviction (or maxmemory 0), "+
						"or use a Redis of its own for idemkit", n.addr, n.maxmemory, n.policy)
				}
				if r.eviction == EvictionWarn {
					r.warnOnce("evict:"+n.addr, "consumer: Redis may evict idemkit records (their handlers would run "+
						"again): set maxmemory-policy noeviction", slogArgs(n)...)
				}
			}
			if !n.persists() {
				r.warnOnce("persist:"+n.addr, "consumer: Redis keeps nothing on disk (appendonly no, save \"\"): "+
					"a restart loses every record and their handlers run again; turn on appendonly", slogArgs(n)...)
			}
		}
	}
	return nil
}

func slogArgs(n nodeReport, extra ...any) []any {
	return append([]any{"addr", n.addr, "maxmemory", n.maxmemory, "maxmemory-policy", n.policy,
		"appendonly", n.aof, "save", n.save}, extra...)
}

// warnOnce logs msg the first time this store meets what.
func (r *Store) warnOnce(what, msg string, args ...any) {
	if _, seen := r.warned.LoadOrStore(what, true); !seen {
		r.s.Logger.Warn(msg, args...)
	}
}

// inspect reads every node's configuration, each in one round trip, and stops
// waiting when ctx is done whether or not the client honours its deadline.
func inspect(ctx context.Context, c goredis.UniversalClient) []nodeReport {
	done := make(chan []nodeReport, 1)
	go func() { done <- inspectNodes(ctx, c) }()
	select {
	case out := <-done:
		return out
	case <-ctx.Done():
		return []nodeReport{{addr: addrOf(c), err: fmt.Errorf("no answer within the bound: %w", context.Cause(ctx))}}
	}
}

func inspectNodes(ctx context.Context, c goredis.UniversalClient) []nodeReport {
	var mu sync.Mutex
	var out []nodeReport
	one := func(ctx context.Context, node *goredis.Client) error {
		n := readNode(ctx, node)
		mu.Lock()
		out = append(out, n)
		mu.Unlock()
		return nil
	}
	var err error
	switch cc := c.(type) {
	case *goredis.ClusterClient:
		err = cc.ForEachMaster(ctx, one)
	case *goredis.Ring:
		err = cc.ForEachShard(ctx, one)
	case *goredis.Client:
		_ = one(ctx, cc)
	default:
		out = append(out, nodeReport{addr: fmt.Sprintf("%T", c), err: c.Ping(ctx).Err()})
	}
	if err != nil && len(out) == 0 {
		out = append(out, nodeReport{addr: addrOf(c), err: err})
	}
	return out
}

func readNode(ctx context.Context, c *goredis.Client) nodeReport {
	n := nodeReport{addr: addrOf(c)}
	pipe := c.Pipeline()
	ping := pipe.Ping(ctx)
	cfg := []*goredis.MapStringStringCmd{
		pipe.ConfigGet(ctx, "maxmemory-policy"), pipe.ConfigGet(ctx, "maxmemory"),
		pipe.ConfigGet(ctx, "appendonly"), pipe.ConfigGet(ctx, "save"),
	}
	_, _ = pipe.Exec(ctx)
	if err := ping.Err(); err != nil {
		n.err = err
		return n
	}
	vals := map[string]string{}
	for _, cmd := range cfg {
		m, err := cmd.Result()
		if err != nil {
			n.configErr = err
			return n
		}
		for k, v := range m {
			vals[k] = v
		}
	}
	n.policy, n.save, n.aof = vals["maxmemory-policy"], vals["save"], vals["appendonly"] == "yes"
	n.maxmemory, _ = strconv.ParseInt(vals["maxmemory"], 10, 64)
	if n.policy == "" {
		n.configErr = errors.New("CONFIG GET maxmemory-policy answered nothing")
	}
	return n
}

func addrOf(c goredis.UniversalClient) string {
	switch cc := c.(type) {
	case *goredis.Client:
		if a := cc.Options().Addr; a != "" && a != "FailoverClient" {
			return a
		}
		return "the Sentinel-managed primary"
	case *goredis.ClusterClient:
		return strings.Join(cc.Options().Addrs, ",")
	}
	return fmt.Sprintf("%T", c)
}
