package admintest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
)

// states are the states a record can be in when an operator changes it, and
// how the suite puts a key in each; "absent" is no record.
var states = []struct {
	name  string
	fence int64 // the record's fence once made
	make  func(t *testing.T, s Store, key consumer.Key)
}{
	{"started", 1, func(t *testing.T, s Store, key consumer.Key) { claimDead(t, s, key) }},
	{"completed", 1, func(t *testing.T, s Store, key consumer.Key) { run(t, s, key, "p", nil) }},
	{"failed", 1, func(t *testing.T, s Store, key consumer.Key) { run(t, s, key, "p", errPermanent) }},
	{"retry", 1, func(t *testing.T, s Store, key consumer.Key) { run(t, s, key, "p", errors.New("later")) }},
	{"forgotten", 1, func(t *testing.T, s Store, key consumer.Key) {
		run(t, s, key, "p", nil)
		change(t, s, consumer.OpForget, key, 0, consumer.ChangeApplied)
	}},
	{"absent", 0, func(*testing.T, Store, consumer.Key) {}},
}

// allowed says whether op applies to a record in state, and the state it leaves.
func allowed(op consumer.OperatorOp, state string) (string, bool) {
	switch {
	case op == consumer.OpUnstick && state == "started":
		return "retry", true
	case op == consumer.OpForget && state != "forgotten":
		return "forgotten", true
	case op == consumer.OpRerun && (state == "completed" || state == "failed"):
		return "retry", true
	}
	return "", false
}

// change runs one transition through the SPI and checks its status.
func change(t *testing.T, s Store, op consumer.OperatorOp, key consumer.Key, fence int64, want consumer.OperatorStatus) consumer.OperatorReply {
	t.Helper()
	rep, err := s.ChangeRecord(context.Background(), consumer.OperatorChange{Op: op, Key: key, Fence: fence,
		Note: fmt.Sprintf("%s by alice: %s", op, key)})
	if err != nil {
		t.Fatalf("%s %s: %v", op, key, err)
	}
	if rep.Status != want {
		t.Fatalf("%s %s: status %d, want %d: %+v", op, key, rep.Status, want, rep)
	}
	return rep
}

// testMatrix runs unstick, forget and rerun on a record in every state and
// checks the reply and the record each leaves.
func testMatrix(t *testing.T, fx Fixtures) {
	s := must(t, fx, "svc")
	for _, op := range []consumer.OperatorOp{consumer.OpUnstick, consumer.OpForget, consumer.OpRerun} {
		for _, st := range states {
			t.Run(op.String()+"/"+st.name, func(t *testing.T) {
				key := consumer.Key(op.String() + "-" + st.name)
				st.make(t, s, key)
				before := peek(t, s, key)
				after, ok := allowed(op, st.name)
				switch {
				case st.name == "absent":
					rep := change(t, s, op, key, 0, consumer.ChangeNotFound)
					if rep.State != "" || rep.Fence != 0 || rep.NewFence != 0 {
						t.Fatalf("reply for no record: %+v", rep)
					}
					if rec := peek(t, s, key); rec.Found {
						t.Fatalf("a %s of no record made one: %+v", op, rec)
					}
					return
				case !ok:
					rep := change(t, s, op, key, 0, consumer.ChangeWrongState)
					if rep.State != st.name || rep.Fence != st.fence || rep.NewFence != st.fence {
						t.Fatalf("reply: %+v", rep)
					}
					if rec := peek(t, s, key); rec.State != st.name || rec.Fence != st.fence || len(rec.Notes) != len(before.Notes) {
						t.Fatalf("a refused %s changed the record: %+v", op, rec)
					}
					return
				}
				rep := change(t, s, op, key, st.fence, consumer.ChangeApplied)
				newFence := st.fence
				if op == consumer.OpUnstick {
					newFence++
				}
				if rep.State != st.name || rep.Fence != st.fence || rep.NewFence != newFence {
					t.Fatalf("reply: %+v", rep)
				}
				if leased := st.name == "started" && op != consumer.OpRerun; leased != (rep.LeaseLeft > lease/2) {
					t.Fatalf("lease left %v in the reply to a %s of a %s record", rep.LeaseLeft, op, st.name)
				}
				rec := peek(t, s, key)
				notes := append([]string{fmt.Sprintf("%s by alice: %s", op, key)}, texts(before.Notes)...)
				if !rec.Found || rec.State != after || rec.Fence != newFence || rec.Owner != "" || rec.Counted ||
					rec.Locked || rec.Attempts != 0 || rec.Result != nil || rec.Dropped != "" || rec.Permanent ||
					!hasNotes(rec.Notes, notes...) || rec.TTL <= 0 {
					t.Fatalf("after %s of a %s record: %+v", op, st.name, rec)
				}
				if keepsFP := op != consumer.OpForget; keepsFP == rec.Fingerprint.IsZero() {
					t.Fatalf("after %s of a %s record the fingerprint is %v", op, st.name, rec.Fingerprint)
				}
				if st.name != "completed" && len(rec.History) != len(before.History) {
					t.Fatalf("after %s of a %s record the error history is %v, was %v", op, st.name, rec.History, before.History)
				}
				// The next delivery claims the key at once and runs it as attempt 1,
				// above every fence it had.
				r, runs := run(t, s, key, "p", nil)
				if runs != 1 || r.Outcome != consumer.Success || r.Fence != newFence+1 || r.Attempt != 1 {
					t.Fatalf("the delivery after %s of a %s record: runs %d, %+v", op, st.name, runs, r)
				}
				if rec := peek(t, s, key); rec.State != "completed" || !hasNotes(rec.Notes, notes...) {
					t.Fatalf("the completion after %s of a %s record: %+v", op, st.name, rec)
				}
			})
		}
	}
}

func texts(notes []consumer.OperatorNote) []string {
	out := make([]string, len(notes))
	for i, n := range notes {
		out[i] = n.Text
	}
	return out
}

// testFence checks the fence precondition: a change at a fence the record no
// longer holds changes nothing.
func testFence(t *testing.T, fx Fixtures) {
	s := must(t, fx, "svc")
	key := consumer.Key("fenced")
	claimDead(t, s, key)
	for _, op := range []consumer.OperatorOp{consumer.OpUnstick, consumer.OpForget, consumer.OpRerun} {
		rep := change(t, s, op, key, 7, consumer.ChangeFenceMoved)
		if rep.State != "started" || rep.Fence != 1 || rep.NewFence != 1 {
			t.Fatalf("%s at a stale fence: %+v", op, rep)
		}
	}
	if rec := peek(t, s, key); rec.State != "started" || rec.Owner != "dead-owner" || rec.Fence != 1 || len(rec.Notes) != 0 {
		t.Fatalf("changes at a stale fence changed the record: %+v", rec)
	}
	change(t, s, consumer.OpUnstick, key, 1, consumer.ChangeApplied)
	// The operator saw fence 1; the unstick moved it on.
	change(t, s, consumer.OpForget, key, 1, consumer.ChangeFenceMoved)
	rep := change(t, s, consumer.OpForget, key, 2, consumer.ChangeApplied)
	if rep.State != "retry" || rep.Fence != 2 || rep.NewFence != 2 {
		t.Fatalf("forget at the fence it holds: %+v", rep)
	}
	in := inspector(t, s)
	if _, err := in.Rerun(context.Background(), admin.Change{Key: key, Actor: "bob", Reason: "x", Fence: 9}); !errors.Is(err, admin.ErrFenceMoved) {
		t.Fatalf("rerun at a stale fence: %v", err)
	}
}

// testOtherScope checks that a change names its record by scope and key: a key
// of another scope is not found.
func testOtherScope(t *testing.T, fx Fixtures) {
	s := must(t, fx, "svc")
	key := consumer.Key("mine")
	run(t, s, key, "p", nil)
	for _, op := range []consumer.OperatorOp{consumer.OpUnstick, consumer.OpForget, consumer.OpRerun} {
		rep, err := s.ChangeRecord(context.Background(), consumer.OperatorChange{Op: op, Scope: "elsewhere", Key: key, Note: "x"})
		if err != nil || rep.Status != consumer.ChangeNotFound {
			t.Fatalf("%s in another scope: %+v, %v", op, rep, err)
		}
	}
	rep, err := s.ChangeRecord(context.Background(), consumer.OperatorChange{Op: consumer.OpRerun, Scope: "svc", Key: key, Note: "x"})
	if err != nil || rep.Status != consumer.ChangeApplied {
		t.Fatalf("rerun naming the store's own scope: %+v, %v", rep, err)
	}
}
