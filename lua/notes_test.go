package lua_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lua"
)

// An operator's note (flag 32) survives every script that rewrites the record,
// on every path of complete; a record no operator changed carries not a byte of
// notes.
func TestOperatorNotesSurvive(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := srv.Client(t)
	r := lua.NewRunner(c)
	ctx := context.Background()
	now := time.Now().Unix()
	args := lua.BeginArgs{Lease: time.Minute, Retention: time.Hour, MaxAttempts: 5, Now: now}
	sargs := lua.SettleArgs{MaxAttempts: 5, Now: now}
	fp := [16]byte{7}
	const note = "unstick by ops: worker died"
	// noted leaves key started by owner, after an operator unstuck a dead claim.
	noted := func(key, owner string) lua.BeginReply {
		t.Helper()
		begin(ctx, r, args, lua.BeginItem{Key: key, Owner: "dead", Fingerprint: &fp})
		if rep, err := r.Operate(ctx, lua.OperateArgs{Key: key, Op: lua.OpUnstick, Now: now, Retention: time.Hour, Note: note}); err != nil || rep.Code != lua.OperatorOK {
			t.Fatalf("unstick %s: %+v %v", key, rep, err)
		}
		claim := begin(ctx, r, args, lua.BeginItem{Key: key, Owner: owner, Fingerprint: &fp})[0]
		if claim.Err != nil || claim.Code != lua.Acquired {
			t.Fatalf("claim %s: %+v", key, claim)
		}
		return claim
	}
	check := func(key, state string) lua.Record {
		t.Helper()
		rec, err := r.Peek(ctx, key)
		if err != nil || rec.Corrupt || rec.StateName() != state || len(rec.Notes) != 1 || rec.Notes[0].Text != note ||
			rec.Notes[0].Time.Unix() != now || rec.Fingerprint != fp {
			t.Fatalf("%s: want %s with the note, got %+v %v", key, state, rec, err)
		}
		return rec
	}

	for _, tc := range []struct {
		name string
		item func(claim lua.BeginReply) lua.SettleItem
	}{
		{"known claim", func(cl lua.BeginReply) lua.SettleItem {
			return lua.SettleItem{Fence: cl.Fence, Attempts: cl.Attempts, Created: cl.Created, Fingerprint: &fp}
		}},
		{"late", func(cl lua.BeginReply) lua.SettleItem {
			return lua.SettleItem{Fence: cl.Fence, Attempts: cl.Attempts, Created: cl.Created, Fingerprint: &fp, Late: true}
		}},
		{"unknown fence", func(lua.BeginReply) lua.SettleItem { return lua.SettleItem{} }},
		{"fingerprint's place misjudged", func(cl lua.BeginReply) lua.SettleItem {
			return lua.SettleItem{Fence: cl.Fence, Attempts: cl.Attempts, Created: cl.Created}
		}},
	} {
		key := "t:{complete " + tc.name + "}"
		claim := noted(key, "o")
		it := tc.item(claim)
		it.Key, it.Owner, it.Complete, it.Result = key, "o", true, []byte(`"r"`)
		if a := settle(ctx, r, sargs, []lua.SettleItem{it})[0]; a.Err != nil || a.Ack != lua.AckOK {
			t.Fatalf("%s: complete = %+v", tc.name, a)
		}
		rec := check(key, "completed")
		if string(rec.Result) != `"r"` || rec.Fence != claim.Fence || rec.Attempts != claim.Attempts {
			t.Fatalf("%s: completed %+v", tc.name, rec)
		}
		if tc.name == "late" && rec.TTL > time.Hour {
			t.Fatalf("a late completion keeps the TTL %v, want the retention afresh", rec.TTL)
		}
		// Sent again after a lost reply: the same answer, nothing changed.
		if a := settle(ctx, r, sargs, []lua.SettleItem{it})[0]; tc.name != "unknown fence" && (a.Err != nil || a.Ack != lua.AckOK) {
			t.Fatalf("%s: complete sent again = %+v", tc.name, a)
		}
		check(key, "completed")
	}

	key := "t:{others}"
	claim := noted(key, "o")
	owned := []lua.OwnedKey{{Key: key, Owner: "o", Fence: claim.Fence}}
	if a := r.Extend(ctx, time.Minute, owned)[0]; a.Err != nil || a.Ack != lua.AckOK {
		t.Fatalf("extend = %+v", a)
	}
	check(key, "started")
	if a := settle(ctx, r, sargs, []lua.SettleItem{{Key: key, Owner: "o", Fence: claim.Fence, Message: "flaky"}})[0]; a.Ack != lua.AckOK {
		t.Fatalf("fail = %+v", a)
	}
	if rec := check(key, "retry"); len(rec.History) != 1 || rec.History[0].Message != "flaky" {
		t.Fatalf("the error history holds attempts' errors only: %+v", rec.History)
	}
	claim = begin(ctx, r, args, lua.BeginItem{Key: key, Owner: "p", Fingerprint: &fp})[0]
	check(key, "started")
	if a := r.Release(ctx, now, []lua.OwnedKey{{Key: key, Owner: "p", Fence: claim.Fence}})[0]; a.Ack != lua.AckOK {
		t.Fatalf("release = %+v", a)
	}
	check(key, "retry")

	// A record without notes: a completed one is its header, fingerprint and result.
	begin(ctx, r, args, lua.BeginItem{Key: "t:{plain}", Owner: "o", Fingerprint: &fp})
	settle(ctx, r, sargs, []lua.SettleItem{{Key: "t:{plain}", Owner: "o", Fence: 1, Attempts: 1, Created: now, Fingerprint: &fp,
		Complete: true, Result: []byte(`"r"`)}})
	rec, err := r.Peek(ctx, "t:{plain}")
	if err != nil || rec.StateName() != "completed" || len(rec.Raw) != 16+16+3 || rec.Flags&lua.FlagNotes != 0 || rec.Notes != nil {
		t.Fatalf("a completed record without notes: %d bytes, %+v %v", len(rec.Raw), rec, err)
	}
}
