package lua_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lua"
)

// casEnv is a runner on a private server, with the commands it sends recorded.
type casEnv struct {
	t      *testing.T
	ctx    context.Context
	srv    *testenv.Server
	r      *lua.Runner
	hook   *sent
	args   lua.BeginArgs
	sargs  lua.SettleArgs
	native bool // the server has SET IFEQ
}

func newCASEnv(t *testing.T) *casEnv {
	srv := testenv.RedisServer(t)
	c := srv.Client(t)
	e := &casEnv{t: t, ctx: context.Background(), srv: srv, r: lua.NewRunner(c), hook: &sent{}}
	if err := e.r.Load(e.ctx); err != nil {
		t.Fatal(err)
	}
	c.AddHook(e.hook)
	now := time.Now().Unix()
	e.args = lua.BeginArgs{Lease: time.Minute, Retention: time.Hour, MaxAttempts: 3, Now: now}
	e.sargs = lua.SettleArgs{MaxAttempts: 3, Now: now, Retention: time.Hour}
	e.native = lua.NativeCAS(e.r)
	return e
}

// claim claims key for owner, fresh, and returns the completion of that claim.
func (e *casEnv) claim(key, owner string, fp *[16]byte) lua.SettleItem {
	e.t.Helper()
	rep := begin(e.ctx, e.r, e.args, lua.BeginItem{Key: key, Owner: owner, Fingerprint: fp})[0]
	if rep.Err != nil || rep.Code != lua.Acquired {
		e.t.Fatalf("claim %s: %+v", key, rep)
	}
	return lua.SettleItem{Key: key, Owner: owner, Fence: rep.Fence, Attempts: rep.Attempts, Created: rep.Created,
		Fingerprint: fp, Complete: true, Result: []byte(`{"id":1}`)}
}

// A completion of a fresh claim is one SET IFEQ on a server that has it (Redis
// 8.4+, Valkey 8.1+) and runs no script; elsewhere the complete script takes it.
// Either way the record stored, its TTL and the answer are the same, and a
// completion that does not find its claim's started record unchanged goes to the
// script, which answers as it always does.
func TestCompletionPaths(t *testing.T) {
	e := newCASEnv(t)
	if !e.native {
		t.Log("the server has no SET IFEQ (Redis 8.4+, Valkey 8.1+): every completion takes the script")
	}
	c := e.srv.Client(t)
	fp := [16]byte{5}
	setOnly, setThenScript, scriptOnly := []string{"set"}, []string{"set", "evalsha"}, []string{"evalsha"}
	cases := []struct {
		name  string
		setup func(key string) lua.SettleItem
		ack   lua.Ack
		// native is what the completion sends where the server has SET IFEQ: SET
		// alone when it finds the started record its claim wrote; SET, then the
		// script when it does not; the script alone when the claim was not fresh.
		native []string
	}{
		{"fresh claim", func(key string) lua.SettleItem { return e.claim(key, "o1", &fp) }, lua.AckOK, setOnly},
		{"fresh claim without fingerprint", func(key string) lua.SettleItem { return e.claim(key, "o1", nil) }, lua.AckOK, setOnly},
		{"renewed claim", func(key string) lua.SettleItem {
			it := e.claim(key, "o1", &fp)
			if a := e.r.Extend(e.ctx, time.Minute, []lua.OwnedKey{{Key: key, Owner: "o1"}})[0]; a.Ack != lua.AckOK {
				t.Fatalf("extend: %+v", a)
			}
			return it
		}, lua.AckOK, setOnly},
		{"late completion", func(key string) lua.SettleItem {
			it := e.claim(key, "o1", &fp)
			it.Late = true
			return it
		}, lua.AckOK, setOnly},
		{"claim marked counted", func(key string) lua.SettleItem {
			it := e.claim(key, "o1", &fp)
			begin(e.ctx, e.r, e.args, lua.BeginItem{Key: key, Owner: "o1", Fingerprint: &fp, Start: true})
			return it
		}, lua.AckOK, setThenScript},
		{"claim under a lock", func(key string) lua.SettleItem {
			rep := begin(e.ctx, e.r, e.args, lua.BeginItem{Key: key, Owner: "o1", Fingerprint: &fp, Locked: true})[0]
			return lua.SettleItem{Key: key, Owner: "o1", Fence: rep.Fence, Attempts: rep.Attempts, Created: rep.Created,
				Fingerprint: &fp, Complete: true, Result: []byte(`{"id":1}`)}
		}, lua.AckOK, setThenScript},
		{"claim with operator notes", func(key string) lua.SettleItem {
			e.claim(key, "dead", &fp)
			if rep, err := e.r.Operate(e.ctx, lua.OperateArgs{Key: key, Op: lua.OpUnstick, Now: e.args.Now, Retention: time.Hour,
				Note: "unstick by ops: worker died"}); err != nil || rep.Code != lua.OperatorOK {
				t.Fatalf("unstick: %+v %v", rep, err)
			}
			rep := begin(e.ctx, e.r, e.args, lua.BeginItem{Key: key, Owner: "o1", Fingerprint: &fp})[0]
			return lua.SettleItem{Key: key, Owner: "o1", Fence: rep.Fence, Attempts: rep.Attempts, Created: rep.Created,
				Fingerprint: &fp, Complete: true, Result: []byte(`{"id":1}`)}
		}, lua.AckOK, scriptOnly},
		{"claim taken over", func(key string) lua.SettleItem {
			it := e.claim(key, "o1", &fp)
			if err := c.PExpire(e.ctx, key, time.Hour-time.Second).Err(); err != nil { // the lease runs out
				t.Fatal(err)
			}
			if rep := begin(e.ctx, e.r, e.args, lua.BeginItem{Key: key, Owner: "o2", Fingerprint: &fp})[0]; rep.Code != lua.TakenOver {
				t.Fatalf("takeover: %+v", rep)
			}
			return it
		}, lua.AckLeaseLost, setThenScript},
		{"sent again after a lost reply", func(key string) lua.SettleItem {
			it := e.claim(key, "o1", &fp)
			if a := settle(e.ctx, e.r, e.sargs, []lua.SettleItem{it})[0]; a.Err != nil || a.Ack != lua.AckOK {
				t.Fatalf("first completion: %+v", a)
			}
			return it
		}, lua.AckOK, setThenScript},
		{"no record", func(key string) lua.SettleItem {
			return lua.SettleItem{Key: key, Owner: "o1", Fence: 1, Attempts: 1, Created: e.args.Now, Complete: true}
		}, lua.AckLeaseLost, setThenScript},
		{"a list", func(key string) lua.SettleItem {
			if err := c.RPush(e.ctx, key, "a").Err(); err != nil {
				t.Fatal(err)
			}
			return lua.SettleItem{Key: key, Owner: "o1", Fence: 1, Attempts: 1, Created: e.args.Now, Complete: true}
		}, lua.AckCorrupt, setThenScript},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The same completion on twin records: one through the path this server
			// gets, one through the script.
			key, twin := "t:{cas "+tc.name+"}", "t:{script "+tc.name+"}"
			it, twinIt := tc.setup(key), tc.setup(twin)
			e.hook.take()
			got := settle(e.ctx, e.r, e.sargs, []lua.SettleItem{it})[0]
			sends := e.hook.take()
			want := scriptOnly
			if e.native {
				want = tc.native
			}
			if !slices.Equal(sends, want) {
				t.Errorf("sent %v, want %v", sends, want)
			}
			if got.Err != nil || got.Ack != tc.ack {
				t.Fatalf("answered %+v, want ack %d", got, tc.ack)
			}
			scripted := lua.NewRunner(c)
			lua.ForceCAS(scripted, false)
			if w := settle(e.ctx, scripted, e.sargs, []lua.SettleItem{twinIt})[0]; w != got {
				t.Fatalf("the script answered %+v, this path %+v", w, got)
			}
			v, w := c.Get(e.ctx, key).Val(), c.Get(e.ctx, twin).Val()
			if tc.ack == lua.AckOK {
				// byte for byte: the twins were claimed by the same owner at the same time
				fv, err1 := lua.Decode([]byte(v))
				fw, err2 := lua.Decode([]byte(w))
				if err1 != nil || err2 != nil || fv.StateName() != "completed" || string(fv.Result) != `{"id":1}` ||
					v != w {
					t.Fatalf("stored %+v (%v), the script stored %+v (%v)", fv, err1, fw, err2)
				}
			}
			ttl, twinTTL := c.PTTL(e.ctx, key).Val(), c.PTTL(e.ctx, twin).Val()
			if d := ttl - twinTTL; d > time.Second || d < -time.Second {
				t.Fatalf("TTL %v, the script's %v", ttl, twinTTL)
			}
			if it.Late && (ttl > time.Hour || ttl < time.Hour-time.Minute) {
				t.Fatalf("a late completion's TTL is %v, want the retention afresh (1h)", ttl)
			}
		})
	}
}

// A server that refuses SET IFEQ (a syntax error: Redis before 8.4, Valkey before
// 8.1) while the runner believes it has it: the completions it refused are made
// by the script in the same Settle call, and the runner sends the next ones to
// the script alone.
func TestCompletionOnAServerWithoutIFEQ(t *testing.T) {
	e := newCASEnv(t)
	if e.native {
		t.Skip("the server has SET IFEQ")
	}
	lua.ForceCAS(e.r, true)
	fp := [16]byte{6}
	items := []lua.SettleItem{e.claim("t:{a}", "o1", &fp), e.claim("t:{b}", "o2", &fp)}
	e.hook.take()
	for i, a := range settle(e.ctx, e.r, e.sargs, items) {
		if a.Err != nil || a.Ack != lua.AckOK {
			t.Fatalf("item %d: %+v", i, a)
		}
	}
	if sends, want := e.hook.take(), []string{"set", "set", "evalsha"}; !slices.Equal(sends, want) {
		t.Fatalf("sent %v, want %v (SET IFEQ refused, then the script)", sends, want)
	}
	if lua.NativeCAS(e.r) {
		t.Fatal("the runner still sends SET IFEQ after a server refused it")
	}
	items = []lua.SettleItem{e.claim("t:{c}", "o3", &fp)}
	e.hook.take()
	if a := settle(e.ctx, e.r, e.sargs, items)[0]; a.Err != nil || a.Ack != lua.AckOK {
		t.Fatalf("next completion: %+v", a)
	}
	if sends, want := e.hook.take(), []string{"evalsha"}; !slices.Equal(sends, want) {
		t.Fatalf("next completion sent %v, want %v", sends, want)
	}
	for _, k := range []string{"t:{a}", "t:{b}", "t:{c}"} {
		if rec, err := e.r.Peek(e.ctx, k); err != nil || rec.StateName() != "completed" {
			t.Fatalf("%s: %+v %v", k, rec, err)
		}
	}
}

// A runner not told (Load not called) asks with its first Settle, in that call's
// own round trip, and completes those records with the script meanwhile.
func TestFirstSettleAsks(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := srv.Client(t)
	hook := &sent{}
	c.AddHook(hook)
	r := lua.NewRunner(c)
	ctx := context.Background()
	now := time.Now().Unix()
	args := lua.BeginArgs{Lease: time.Minute, Retention: time.Hour, MaxAttempts: 3, Now: now}
	sargs := lua.SettleArgs{MaxAttempts: 3, Now: now, Retention: time.Hour}
	complete := func(key string) {
		t.Helper()
		rep := begin(ctx, r, args, lua.BeginItem{Key: key, Owner: "o"})[0]
		hook.take()
		a := settle(ctx, r, sargs, []lua.SettleItem{{Key: key, Owner: "o", Fence: rep.Fence, Attempts: rep.Attempts,
			Created: rep.Created, Complete: true}})[0]
		if a.Err != nil || a.Ack != lua.AckOK {
			t.Fatalf("complete %s: %+v", key, a)
		}
	}
	complete("t:{first}")
	sends := hook.take()
	if !slices.Contains(sends, "command") || !slices.Contains(sends, "evalsha") && !slices.Contains(sends, "eval") {
		t.Fatalf("the first completion sent %v, want the question (COMMAND DOCS) and the script", sends)
	}
	complete("t:{second}")
	want := []string{"evalsha"}
	if lua.NativeCAS(r) {
		want = []string{"set"}
	}
	if sends := hook.take(); !slices.Equal(sends, want) {
		t.Fatalf("the second completion sent %v, want %v", sends, want)
	}
}

// The complete script answers a batch whose records are all OK with one 0, and
// any other batch with one code per record, in order: the records before the
// first that is not OK are answered OK too.
func TestCompleteScriptAnswersEachRecord(t *testing.T) {
	e := newCASEnv(t)
	lua.ForceCAS(e.r, false)
	c := e.srv.Client(t)
	fp := [16]byte{7}
	fresh := func(key string) lua.SettleItem { return e.claim(key, "o1", &fp) }
	takenOver := func(key string) lua.SettleItem {
		it := e.claim(key, "o1", &fp)
		if err := c.PExpire(e.ctx, key, time.Hour-time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		if rep := begin(e.ctx, e.r, e.args, lua.BeginItem{Key: key, Owner: "o2", Fingerprint: &fp})[0]; rep.Code != lua.TakenOver {
			t.Fatalf("takeover: %+v", rep)
		}
		return it
	}
	list := func(key string) lua.SettleItem {
		if err := c.RPush(e.ctx, key, "a").Err(); err != nil {
			t.Fatal(err)
		}
		return lua.SettleItem{Key: key, Owner: "o1", Fence: 1, Attempts: 1, Created: e.args.Now, Complete: true}
	}
	for _, tc := range []struct {
		name  string
		setup []func(string) lua.SettleItem
		want  []lua.Ack
	}{
		{"all OK", []func(string) lua.SettleItem{fresh, fresh, fresh}, []lua.Ack{lua.AckOK, lua.AckOK, lua.AckOK}},
		{"mixed", []func(string) lua.SettleItem{fresh, fresh, takenOver, fresh, list, fresh},
			[]lua.Ack{lua.AckOK, lua.AckOK, lua.AckLeaseLost, lua.AckOK, lua.AckCorrupt, lua.AckOK}},
		{"first lost", []func(string) lua.SettleItem{takenOver, fresh}, []lua.Ack{lua.AckLeaseLost, lua.AckOK}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items := make([]lua.SettleItem, len(tc.setup))
			for i, f := range tc.setup {
				items[i] = f("t:{answers " + tc.name + "}:" + string(rune('a'+i)))
			}
			e.hook.take()
			got := settle(e.ctx, e.r, e.sargs, items)
			if sends := e.hook.take(); !slices.Equal(sends, []string{"evalsha"}) {
				t.Fatalf("sent %v, want one evalsha", sends)
			}
			for i, a := range got {
				if a.Err != nil || a.Ack != tc.want[i] {
					t.Fatalf("record %d answered %+v, want %d (all: %+v)", i, a, tc.want[i], got)
				}
			}
		})
	}
}
