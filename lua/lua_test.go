package lua_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lua"
)

func TestMain(m *testing.M) { testenv.Run(m) }

func TestSlot(t *testing.T) {
	for _, tc := range []struct {
		key  string
		slot int
	}{
		{"123456789", 12739}, // CRC16/XMODEM check value 0x31C3
		{"foo", 12182},
		{"foo{}{bar}", 8363}, // empty first tag: the whole key is hashed
		{"idemkit:{payments:k1}", 0},
	} {
		got := lua.Slot(tc.key)
		if lua.Slot("{user1000}.following") != lua.Slot("{user1000}.followers") {
			t.Fatal("keys with one hash tag must share a slot")
		}
		if tc.key == "idemkit:{payments:k1}" {
			if got != lua.Slot("payments:k1") || got != lua.Slot("other:{payments:k1}:x") {
				t.Fatalf("record keys must hash by their tag: %d", got)
			}
			continue
		}
		if got != tc.slot {
			t.Errorf("Slot(%q) = %d, want %d", tc.key, got, tc.slot)
		}
	}
}

// settle is Runner.Settle for tests: the answers as a slice.
func settle(ctx context.Context, r *lua.Runner, a lua.SettleArgs, items []lua.SettleItem) []lua.AckReply {
	out := make([]lua.AckReply, len(items))
	r.Settle(ctx, a, lua.Settlements{Items: items, Replies: out})
	return out
}

// begin is Runner.Begin for tests: the answers as a slice.
func begin(ctx context.Context, r *lua.Runner, a lua.BeginArgs, items ...lua.BeginItem) []lua.BeginReply {
	out := make([]lua.BeginReply, len(items))
	r.Begin(ctx, a, lua.Claims{Items: items, Replies: out})
	return out
}

// A SCRIPT FLUSH between calls is answered by reloading, for a lone call (EVALSHA
// then EVAL) and inside a pipeline (SCRIPT LOAD, then the calls again).
func TestReloadAfterScriptFlush(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := srv.Client(t)
	r := lua.NewRunner(c)
	ctx := context.Background()
	args := lua.BeginArgs{Lease: time.Second, Retention: time.Minute, MaxAttempts: 3, Now: time.Now().Unix()}
	keys := []string{"t:{a}", "t:{b}", "t:{c}"}

	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	lone := begin(ctx, r, args, lua.BeginItem{Key: keys[0], Owner: "o"})
	if lone[0].Err != nil || lone[0].Code != lua.Acquired {
		t.Fatalf("lone begin after flush: %+v", lone[0])
	}
	reps := begin(ctx, r, args, lua.BeginItem{Key: keys[1], Owner: "o"}, lua.BeginItem{Key: keys[2], Owner: "o"})
	for _, rep := range reps {
		if rep.Err != nil || rep.Code != lua.Acquired {
			t.Fatalf("begin: %+v", rep)
		}
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// One complete call and one fail call: a pipeline of two EVALSHAs.
	acks := settle(ctx, r, lua.SettleArgs{MaxAttempts: 3, Now: time.Now().Unix()}, []lua.SettleItem{
		{Key: keys[1], Owner: "o", Fence: 1, Attempts: 1, Complete: true, Result: []byte("1")},
		{Key: keys[2], Owner: "o", Fence: 1, Attempts: 1, Message: "boom"},
	})
	if acks[0].Err != nil || acks[0].Ack != lua.AckOK || acks[1].Err != nil || acks[1].Ack != lua.AckOK {
		t.Fatalf("settle after flush in a pipeline: %+v", acks)
	}
	rec, err := r.Peek(ctx, keys[2])
	if err != nil || rec.StateName() != "retry" || len(rec.History) != 1 || rec.History[0].Message != "boom" || rec.Attempts != 1 {
		t.Fatalf("peek: %+v %v", rec, err)
	}
}

// Values at a record key that idemkit did not write, or records cut short, are
// reported, never decoded as records and never changed, by any script.
func TestForeignValues(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := srv.Client(t)
	ctx := context.Background()
	r := lua.NewRunner(c)
	now := time.Now().Unix()
	whole := lua.AppendCompleted(nil, 3, 2, &[16]byte{1}, now, now, []byte(`"ok"`), "")
	cases := []struct {
		name  string
		value string
	}{
		{"text", "hello"},
		{"long text", strings.Repeat("x", 40)},
		{"another layout", "\x21" + strings.Repeat("\x00", 20)},
		{"unknown state", "\x19" + strings.Repeat("\x00", 20)},
		{"cut in the fingerprint", string(whole[:20])},
		{"started cut in its owner", string(lua.AppendStarted(nil, "worker-7", nil, false, false, time.Minute, now)[:18])},
		{"cut in its operator notes", "\x12\x20" + strings.Repeat("\x00", 14) + "\x02\x00\x00\x00\x00\x00\x05ab"},
	}
	args := lua.BeginArgs{Lease: time.Second, Retention: time.Minute, MaxAttempts: 3, Now: now}
	for _, tc := range cases {
		key := "t:{" + tc.name + "}"
		if err := c.Set(ctx, key, tc.value, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		rec, err := r.Peek(ctx, key)
		if err != nil || !rec.Found || !rec.Corrupt || rec.Reason == "" {
			t.Fatalf("%s: peek = %+v %v", tc.name, rec, err)
		}
		if rep := begin(ctx, r, args, lua.BeginItem{Key: key, Owner: "o"})[0]; rep.Err != nil || rep.Code != lua.Corrupt || rep.Data == "" {
			t.Fatalf("%s: begin = %+v", tc.name, rep)
		}
		done := settle(ctx, r, lua.SettleArgs{MaxAttempts: 3, Now: now}, []lua.SettleItem{
			{Key: key, Owner: "o", Fence: 1, Attempts: 1, Complete: true, Result: []byte("1")},
		})[0]
		fail := settle(ctx, r, lua.SettleArgs{MaxAttempts: 3, Now: now}, []lua.SettleItem{{Key: key, Owner: "o", Fence: 1, Message: "x"}})[0]
		ext := r.Extend(ctx, time.Second, []lua.OwnedKey{{Key: key, Owner: "o"}})[0]
		rel := r.Release(ctx, now, []lua.OwnedKey{{Key: key, Owner: "o", Fence: 1}})[0]
		for _, a := range []lua.AckReply{done, fail, ext, rel} {
			if a.Err != nil || a.Ack != lua.AckCorrupt {
				t.Fatalf("%s: complete/fail/extend/release = %+v %+v %+v %+v", tc.name, done, fail, ext, rel)
			}
		}
		if v, err := c.Get(ctx, key).Result(); err != nil || v != tc.value {
			t.Fatalf("%s: the value was changed to %q (%v)", tc.name, v, err)
		}
		if ttl := c.TTL(ctx, key).Val(); ttl < 59*time.Minute {
			t.Fatalf("%s: the TTL was changed to %v", tc.name, ttl)
		}
	}
	// Other types: a hash and a list.
	if err := c.HSet(ctx, "t:{h}", "s", "completed").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.RPush(ctx, "t:{l}", "a").Err(); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"t:{h}", "t:{l}"} {
		rec, err := r.Peek(ctx, key)
		if err != nil || !rec.Corrupt {
			t.Fatalf("peek of %s: %+v %v", key, rec, err)
		}
		if rep := begin(ctx, r, args, lua.BeginItem{Key: key, Owner: "o"})[0]; rep.Code != lua.Corrupt {
			t.Fatalf("begin on %s: %+v", key, rep)
		}
		a := settle(ctx, r, lua.SettleArgs{MaxAttempts: 3, Now: now}, []lua.SettleItem{
			{Key: key, Owner: "o", Fence: 1, Complete: true, Result: []byte("1")},
		})[0]
		if a.Ack != lua.AckCorrupt {
			t.Fatalf("complete on %s: %+v", key, a)
		}
	}
	if n, _ := c.HLen(ctx, "t:{h}").Result(); n != 1 {
		t.Fatal("the hash was changed")
	}
}

// Records of one call share a hash slot on a cluster; on one server one call
// carries them all.
func TestGroupingOnCluster(t *testing.T) {
	cl := testenv.RedisCluster(t)
	client := cl.Client(t)
	r := lua.NewRunner(client)
	ctx := context.Background()
	for _, k := range []string{"idemkit:{payments:k1}", "{user1000}.following", "plain", "a{b}c{d}"} {
		want, err := client.ClusterKeySlot(ctx, k).Result()
		if err != nil || int64(lua.Slot(k)) != want {
			t.Fatalf("Slot(%q) = %d, CLUSTER KEYSLOT says %d (%v)", k, lua.Slot(k), want, err)
		}
	}
	var items []lua.BeginItem
	for i := 0; i < 300; i++ {
		items = append(items, lua.BeginItem{Key: fmt.Sprintf("t:{k%d}", i%37), Owner: fmt.Sprint("o", i)})
	}
	reps := begin(ctx, r, lua.BeginArgs{Lease: time.Second, Retention: time.Minute, MaxAttempts: 3}, items...)
	acquired := map[string]bool{}
	for i, rep := range reps {
		if rep.Err != nil {
			t.Fatalf("item %d: %v", i, rep.Err)
		}
		switch rep.Code {
		case lua.Acquired:
			if acquired[items[i].Key] {
				t.Fatalf("%s acquired twice", items[i].Key)
			}
			acquired[items[i].Key] = true
		case lua.InProgress:
			if !acquired[items[i].Key] {
				t.Fatalf("item %d in progress before its key was acquired", i)
			}
		default:
			t.Fatalf("item %d: code %d", i, rep.Code)
		}
	}
	if len(acquired) != 37 {
		t.Fatalf("%d keys acquired, want 37", len(acquired))
	}
}

// A forgotten record (what an operator's forget leaves) is claimed afresh, with a
// fence larger than any the key had.
func TestForgottenRecordKeepsItsFence(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := srv.Client(t)
	ctx := context.Background()
	r := lua.NewRunner(c)
	now := time.Now().Unix()
	tomb := []byte{lua.Version<<4 | lua.StateForgotten, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if err := c.Set(ctx, "t:{gone}", tomb, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	rec, err := r.Peek(ctx, "t:{gone}")
	if err != nil || rec.Corrupt || rec.StateName() != "forgotten" || rec.Fence != 7 {
		t.Fatalf("peek: %+v %v", rec, err)
	}
	fp := [16]byte{3}
	rep := begin(ctx, r, lua.BeginArgs{Lease: time.Minute, Retention: time.Hour, MaxAttempts: 3, Now: now},
		lua.BeginItem{Key: "t:{gone}", Owner: "o", Fingerprint: &fp})[0]
	if rep.Err != nil || rep.Code != lua.Acquired || rep.Fence != 8 || rep.Attempts != 1 || !rep.HasFP || rep.Fingerprint != fp {
		t.Fatalf("claim of a forgotten record: %+v", rep)
	}
	rec, _ = r.Peek(ctx, "t:{gone}")
	if rec.StateName() != "started" || rec.Owner != "o" || rec.Created.Unix() != now {
		t.Fatalf("after the claim: %+v", rec)
	}
}

// A retry record that holds no error (its attempts were released or taken over,
// never failed) found at max attempts is failed with an empty error history.
func TestExhaustedWithoutAnError(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := srv.Client(t)
	ctx := context.Background()
	r := lua.NewRunner(c)
	retry := []byte{lua.Version<<4 | lua.StateRetry, 0, 0, 0, 0, 4, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0}
	if err := c.Set(ctx, "t:{released}", retry, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	rep := begin(ctx, r, lua.BeginArgs{Lease: time.Minute, Retention: time.Hour, MaxAttempts: 3, Now: time.Now().Unix()},
		lua.BeginItem{Key: "t:{released}", Owner: "o"})[0]
	if rep.Err != nil || rep.Code != lua.Exhausted || rep.Fence != 4 || rep.Attempts != 3 || rep.Data != "" {
		t.Fatalf("begin: %+v", rep)
	}
	rec, err := r.Peek(ctx, "t:{released}")
	if err != nil || rec.Corrupt || rec.StateName() != "failed" || len(rec.History) != 0 {
		t.Fatalf("peek: %+v %v", rec, err)
	}
}
