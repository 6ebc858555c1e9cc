package admintest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
)

func who(k consumer.Key, reason string) admin.Change {
	return admin.Change{Key: k, Actor: "alice", Reason: reason}
}

// testUnstick: the old owner of an unstuck claim loses it at its next call, and
// the next delivery runs the key once.
func testUnstick(t *testing.T, fx Fixtures) {
	ctx := context.Background()
	s := must(t, fx, "svc")
	in := inspector(t, s)
	key := consumer.Key("stuck")
	claim := claimDead(t, s, key)
	res, err := in.Unstick(ctx, who(key, "worker died in the outage"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Before != "started" || res.After != "retry" || res.Fence != 1 || res.NewFence != 2 || res.LeaseLeft < lease-time.Minute {
		t.Fatalf("unstick: %+v", res)
	}
	note := "unstick by alice: worker died in the outage"
	if rec := inspect(t, in, key); rec.State != "retry" || rec.Attempts != 0 || len(rec.History) != 0 || !hasNotes(rec.Notes, note) {
		t.Fatalf("inspect after unstick: %+v", rec)
	}
	owned := []consumer.Owned{{Key: key, Owner: "dead-owner", Ref: claim.Ref, Fence: claim.Fence}}
	if err := s.Extend(ctx, owned)[0]; !errors.Is(err, consumer.ErrLeaseLost) {
		t.Fatalf("old owner's renewal: %v", err)
	}
	if err := s.Release(ctx, owned)[0]; !errors.Is(err, consumer.ErrLeaseLost) {
		t.Fatalf("old owner's release: %v", err)
	}
	for _, complete := range []bool{true, false} {
		rep := s.Settle(ctx, []consumer.Settlement{{Key: key, Owner: "dead-owner", Ref: claim.Ref, Fence: claim.Fence,
			Attempts: 1, Created: claim.Created, Fingerprint: claim.Fingerprint, Complete: complete, Message: "late"}})[0]
		if !errors.Is(rep.Err, consumer.ErrLeaseLost) {
			t.Fatalf("old owner's settlement (complete %v): %+v", complete, rep)
		}
	}
	r, runs := run(t, s, key, "p", nil)
	if runs != 1 || r.Outcome != consumer.Success || r.Fence != 3 || r.Attempt != 1 {
		t.Fatalf("next delivery: runs %d, %+v", runs, r)
	}
	if _, runs := run(t, s, key, "p", nil); runs != 0 {
		t.Fatalf("a later duplicate ran %d times", runs)
	}
	if rec := inspect(t, in, key); rec.State != "completed" || !hasNotes(rec.Notes, note) {
		t.Fatalf("the operator's note did not survive the completion: %+v", rec)
	}
	if _, err := in.Unstick(ctx, who(key, "again")); !errors.Is(err, admin.ErrWrongState) {
		t.Fatalf("unstick of a completed key: %v", err)
	}
}

// testForget: a forgotten key runs afresh with another payload, at a fence above
// the old one.
func testForget(t *testing.T, fx Fixtures) {
	ctx := context.Background()
	s := must(t, fx, "svc")
	in := inspector(t, s)
	key := consumer.Key("forget-me")
	run(t, s, key, "v1", nil)
	if _, runs := run(t, s, key, "v1", errPermanent); runs != 0 {
		t.Fatalf("a duplicate ran %d times", runs)
	}
	res, err := in.Forget(ctx, who(key, "re-encoded payloads"))
	if err != nil || res.Before != "completed" || res.After != "forgotten" || res.NewFence != 1 || res.LeaseLeft != 0 {
		t.Fatalf("forget: %+v, %v", res, err)
	}
	note := "forget by alice: re-encoded payloads"
	rec, err := in.Inspect(ctx, "", key)
	if err != nil || rec.State != "forgotten" || rec.Fence != 1 || !rec.Fingerprint.IsZero() || !hasNotes(rec.Notes, note) {
		t.Fatalf("inspect after forget: %+v, %v", rec, err)
	}
	r, runs := run(t, s, key, "v2", nil)
	if runs != 1 || r.Outcome != consumer.Success || r.Fence != 2 || r.Attempt != 1 {
		t.Fatalf("after forget: runs %d, %+v", runs, r)
	}
	if rec := inspect(t, in, key); rec.State != "completed" || !hasNotes(rec.Notes, note) {
		t.Fatalf("the operator's note did not survive the fresh start and its completion: %+v", rec)
	}
	if _, err := in.Forget(ctx, who("nothing-here", "x")); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("forget of no record: %v", err)
	}
}

// testRerun: a completed or failed key runs once more, keeps its fingerprint,
// and is a duplicate again afterwards.
func testRerun(t *testing.T, fx Fixtures) {
	ctx := context.Background()
	s := must(t, fx, "svc")
	in := inspector(t, s)
	for _, tc := range []struct {
		name string
		err  error
	}{{"failed", errPermanent}, {"completed", nil}} {
		key := consumer.Key("rerun-" + tc.name)
		run(t, s, key, "p", tc.err)
		res, err := in.Rerun(ctx, admin.Change{Key: key, Actor: "bob", Reason: "fixed in v2", Fence: 1})
		if err != nil || res.Before != tc.name || res.After != "retry" || res.NewFence != 1 {
			t.Fatalf("rerun %s: %+v, %v", tc.name, res, err)
		}
		r, runs := run(t, s, key, "p", nil)
		if runs != 1 || r.Outcome != consumer.Success || r.Fence != 2 || r.Attempt != 1 {
			t.Fatalf("rerun %s: runs %d, %+v", tc.name, runs, r)
		}
		if rec := inspect(t, in, key); rec.State != "completed" || !hasNotes(rec.Notes, "rerun by bob: fixed in v2") {
			t.Fatalf("rerun %s: the operator's note did not survive the completion: %+v", tc.name, rec)
		}
		if _, runs := run(t, s, key, "p", nil); runs != 0 {
			t.Fatalf("rerun %s: a later duplicate ran %d times", tc.name, runs)
		}
		if r, _ := run(t, s, key, "other", nil); !errors.Is(r.Err, consumer.ErrPayloadConflict) {
			t.Fatalf("rerun %s keeps the fingerprint: %+v", tc.name, r)
		}
	}
	key := consumer.Key("rerun-running")
	claimDead(t, s, key)
	var se *admin.StateError
	if _, err := in.Rerun(ctx, who(key, "x")); !errors.As(err, &se) || se.State != "started" {
		t.Fatalf("rerun of a running key: %v", err)
	}
}

// testNotes: an operator's note survives claims, takeovers, failures, releases,
// completions and a forget's fresh start; the newest 8 are kept, the longest
// the Inspector writes whole.
func testNotes(t *testing.T, fx Fixtures) {
	ctx := context.Background()
	s := must(t, fx, "svc")
	in := inspector(t, s)
	key := consumer.Key("noted")
	claim := func(owner string) consumer.ClaimReply {
		t.Helper()
		c := s.Begin(ctx, []consumer.Claim{{Key: key, Owner: owner, Fingerprint: consumer.FingerprintOf([]byte("p")), Locked: true, Start: true}})[0]
		if !c.Claimed() {
			t.Fatalf("claim by %s: %+v", owner, c)
		}
		return c
	}
	var notes []string
	change := func(fn func(context.Context, admin.Change) (admin.Result, error), c admin.Change) {
		t.Helper()
		res, err := fn(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		notes = append([]string{res.Note}, notes...)
	}
	expect := func(state, after string) {
		t.Helper()
		if rec := inspect(t, in, key); rec.State != state || !hasNotes(rec.Notes, notes[:min(len(notes), 8)]...) {
			t.Fatalf("after %s: want %s with notes %q, got %+v", after, state, notes, rec)
		}
	}
	claim("dead-owner")
	change(in.Unstick, who(key, "worker died"))
	if _, runs := run(t, s, key, "p", errors.New("flaky upstream")); runs != 1 {
		t.Fatal("the failing attempt did not run")
	}
	expect("retry", "a failure")
	run(t, s, key, "p", consumer.Abandon(errors.New("rate limited")))
	expect("retry", "a release")
	claim("worker-a")
	expect("started", "a claim")
	c := claim("worker-b") // under the key's lock: worker-a lost it
	if c.Status != consumer.StatusTakenOver {
		t.Fatalf("claim under the lock: %+v", c)
	}
	expect("started", "a takeover")
	rep := s.Settle(ctx, []consumer.Settlement{{Key: key, Owner: "worker-b", Ref: c.Ref, Fence: c.Fence, Attempts: c.Attempts,
		Created: c.Created, Fingerprint: c.Fingerprint, Complete: true, Result: []byte(`"done"`)}})[0]
	if rep.Err != nil {
		t.Fatal(rep.Err)
	}
	expect("completed", "a completion")
	change(in.Rerun, who(key, "fixed in v2"))
	run(t, s, key, "p", errPermanent)
	expect("failed", "a permanent failure")
	change(in.Forget, who(key, "payload re-encoded"))
	if _, runs := run(t, s, key, "re-encoded", nil); runs != 1 {
		t.Fatal("the forgotten key did not run afresh")
	}
	expect("completed", "a forget's fresh start and its completion")

	for i := range 6 {
		c := who(key, fmt.Sprint("rerun ", i))
		if i == 5 {
			c = admin.Change{Key: key, Actor: strings.Repeat("a", 128), Reason: strings.Repeat("r", 1024)}
		}
		change(in.Rerun, c)
		run(t, s, key, "re-encoded", nil)
	}
	if len(notes[0]) != len("rerun by : ")+128+1024 {
		t.Fatalf("the longest note is %d bytes", len(notes[0]))
	}
	expect("completed", "nine operator changes")
}

// testBadInput: changes the Inspector refuses before they reach the store, and
// ops and keys the store refuses.
func testBadInput(t *testing.T, fx Fixtures) {
	ctx := context.Background()
	s := must(t, fx, "svc")
	in := inspector(t, s)
	for _, c := range []admin.Change{
		{Key: "k", Actor: "alice"},
		{Key: "k", Reason: "why"},
		{Key: "k", Actor: "a\nb", Reason: "why"},
		{Key: "k", Actor: "alice", Reason: strings.Repeat("x", 2000)},
		{Key: "k", Actor: "alice", Reason: "why", Fence: -1},
	} {
		if _, err := in.Forget(ctx, c); !errors.Is(err, admin.ErrInvalid) {
			t.Fatalf("forget %+v: %v", c, err)
		}
	}
	if _, err := in.Forget(ctx, admin.Change{Key: "", Actor: "alice", Reason: "why"}); !errors.Is(err, consumer.ErrInvalidKey) {
		t.Fatalf("forget of an empty key: %v", err)
	}
	for _, c := range []consumer.OperatorChange{
		{Op: 0, Key: "k", Note: "x"},
		{Op: 99, Key: "k", Note: "x"},
	} {
		if _, err := s.ChangeRecord(ctx, c); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Fatalf("change %+v: %v", c, err)
		}
	}
	if _, err := s.ChangeRecord(ctx, consumer.OperatorChange{Op: consumer.OpForget, Note: "x"}); !errors.Is(err, consumer.ErrInvalidKey) {
		t.Fatalf("change of an empty key: %v", err)
	}
}
