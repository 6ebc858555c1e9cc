package lua_test

import (
	"context"
	"fmt"
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

// A SCRIPT FLUSH between calls is answered by reloading, for a lone call (EVALSHA
// then EVAL) and inside a pipeline (SCRIPT LOAD, then the calls again).
func TestReloadAfterScriptFlush(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := srv.Client(t)
	r := lua.NewRunner(c)
	ctx := context.Background()
	args := lua.BeginArgs{Lease: time.Second, Retention: time.Minute, MaxAttempts: 3}
	keys := []string{"t:{a}", "t:{b}", "t:{c}"}

	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	lone := r.Begin(ctx, args, []lua.BeginItem{{Key: keys[0], Owner: "o"}})
	if lone[0].Err != nil || lone[0].Code != lua.Acquired {
		t.Fatalf("lone begin after flush: %+v", lone[0])
	}
	reps := r.Begin(ctx, args, []lua.BeginItem{{Key: keys[1], Owner: "o"}, {Key: keys[2], Owner: "o"}})
	for _, rep := range reps {
		if rep.Err != nil || rep.Code != lua.Acquired {
			t.Fatalf("begin: %+v", rep)
		}
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// One complete call and one fail call: a pipeline of two EVALSHAs.
	acks := r.Settle(ctx, lua.SettleArgs{Retention: time.Minute, MaxAttempts: 3}, []lua.SettleItem{
		{Key: keys[1], Owner: "o", Complete: true, Result: []byte("1")},
		{Key: keys[2], Owner: "o", Message: "boom"},
	})
	if acks[0].Err != nil || acks[0].Ack != lua.AckOK || acks[1].Err != nil || acks[1].Ack != lua.AckOK {
		t.Fatalf("settle after flush in a pipeline: %+v", acks)
	}
	rec, err := r.Peek(ctx, keys[2])
	if err != nil || rec.State != "retry" || rec.Error != "boom" || rec.Attempts != 1 {
		t.Fatalf("peek: %+v %v", rec, err)
	}
}

// Values at a record key that idemkit did not write are reported, never decoded
// as records and never changed.
func TestForeignValues(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := srv.Client(t)
	ctx := context.Background()
	r := lua.NewRunner(c)
	if err := c.Set(ctx, "t:{s}", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rec, err := r.Peek(ctx, "t:{s}")
	if err != nil || !rec.Corrupt {
		t.Fatalf("peek of a string: %+v %v", rec, err)
	}
	rep := r.Begin(ctx, lua.BeginArgs{Lease: time.Second, Retention: time.Minute, MaxAttempts: 1},
		[]lua.BeginItem{{Key: "t:{s}", Owner: "o"}})[0]
	if rep.Err != nil || rep.Code != lua.Corrupt || rep.Data == "" {
		t.Fatalf("begin on a string: %+v", rep)
	}
	if err := c.HSet(ctx, "t:{h}", "s", "completed", "f", "x", "a", "1").Err(); err != nil {
		t.Fatal(err)
	}
	rec, err = r.Peek(ctx, "t:{h}")
	if err != nil || !rec.Corrupt || rec.Reason == "" {
		t.Fatalf("peek of a record without a numeric fence: %+v %v", rec, err)
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
	reps := r.Begin(ctx, lua.BeginArgs{Lease: time.Second, Retention: time.Minute, MaxAttempts: 3}, items)
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
