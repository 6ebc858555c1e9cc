package lua_test

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lua"
	"github.com/redis/go-redis/v9"
)

// sent records the names of the commands a client sends, pipelined ones each, in
// order.
type sent struct {
	mu    sync.Mutex
	names []string
}

var _ redis.Hook = (*sent)(nil)

func (s *sent) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.add(cmd)
		return next(ctx, cmd)
	}
}

func (s *sent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			s.add(c)
		}
		return next(ctx, cmds)
	}
}

func (s *sent) add(c redis.Cmder) {
	switch c.Name() {
	case "hello", "client": // a new connection's handshake
		return
	}
	s.mu.Lock()
	s.names = append(s.names, strings.ToLower(c.Name()))
	s.mu.Unlock()
}

// take returns the names sent since the last take.
func (s *sent) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.names
	s.names = nil
	return out
}

// record builds a record value by hand: header, fingerprint (fp != nil), operator
// notes (notes != ""), then tail.
func record(state int, flags byte, fence, attempts int, fp *[16]byte, notes string, tail []byte) []byte {
	if fp != nil {
		flags |= lua.FlagFP
	}
	if notes != "" {
		flags |= lua.FlagNotes
	}
	v := []byte{lua.Version<<4 | byte(state), flags}
	v = binary.BigEndian.AppendUint32(v, uint32(fence))
	v = binary.BigEndian.AppendUint16(v, uint16(attempts))
	v = binary.BigEndian.AppendUint32(v, 1700000000)
	v = binary.BigEndian.AppendUint32(v, 1700000100)
	if fp != nil {
		v = append(v, fp[:]...)
	}
	if notes != "" {
		v = append(v, entries(notes)...)
	}
	return append(v, tail...)
}

// entries is an error history or notes block of texts, newest first.
func entries(texts ...string) []byte {
	out := []byte{byte(len(texts))}
	for _, t := range texts {
		out = binary.BigEndian.AppendUint32(out, 1700000050)
		out = binary.BigEndian.AppendUint16(out, uint16(len(t)))
		out = append(out, t...)
	}
	return out
}

// A claim marked ReadFirst answers exactly what the same claim without it
// answers, on every kind of record; it costs one GET and no script when the record
// is completed or failed and its fingerprint matches, and it sends everything
// else to the begin script (or, for a missing key, to the SET NX claim).
func TestReadFirstAgreesWithTheScript(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := srv.Client(t)
	hook := &sent{}
	c.AddHook(hook)
	r := lua.NewRunner(c)
	ctx := context.Background()
	if err := r.Load(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	args := lua.BeginArgs{Lease: 30 * time.Second, Retention: time.Hour, MaxAttempts: 3, Now: now}
	fpA, fpB := [16]byte{0xa}, [16]byte{0xb}
	started := lua.AppendStarted(nil, "other-owner", &fpA, false, true, time.Hour, now)

	read, script, claim := []string{"getex"}, []string{"getex", "evalsha"}, []string{"getex", "set"}
	cases := []struct {
		name  string
		value []byte        // nil: no record; with list set, a list
		list  bool          // the key holds a list
		ttl   time.Duration // 0: an hour
		fp    *[16]byte     // the claim's fingerprint
		code  lua.Code
		sends []string // what the ReadFirst claim sends
	}{
		{"completed, same fingerprint", lua.AppendCompleted(nil, 3, 2, &fpA, now-10, now, []byte(`{"id":1}`), ""), false, 0, &fpA, lua.Duplicate, read},
		{"completed, claim without fingerprint", lua.AppendCompleted(nil, 3, 2, &fpA, now-10, now, []byte(`r`), ""), false, 0, nil, lua.Duplicate, read},
		{"completed without fingerprint", lua.AppendCompleted(nil, 1, 1, nil, now, now, []byte(`r`), ""), false, 0, &fpA, lua.Duplicate, read},
		{"completed, empty result", lua.AppendCompleted(nil, 1, 1, &fpA, now, now, nil, ""), false, 0, &fpA, lua.Duplicate, read},
		{"completed, result dropped", lua.AppendCompleted(nil, 1, 1, &fpA, now, now, nil, "2000000"), false, 0, &fpA, lua.Duplicate, read},
		{"completed, with operator notes", record(lua.StateCompleted, 0, 4, 1, &fpA, "rerun by ops: v2", []byte("res")), false, 0, &fpA, lua.Duplicate, read},
		{"failed for good", record(lua.StateFailed, lua.FlagPermanent|lua.FlagHistory, 2, 1, &fpA, "", entries("card declined", "older")), false, 0, &fpA, lua.Failed, read},
		{"failed, attempts used up", record(lua.StateFailed, lua.FlagHistory, 5, 3, nil, "", entries("timeout")), false, 0, &fpA, lua.Failed, read},
		{"failed, empty history", record(lua.StateFailed, lua.FlagHistory, 5, 3, &fpA, "", []byte{0}), false, 0, &fpA, lua.Failed, read},
		{"failed, history cut short (the script reads it)", record(lua.StateFailed, lua.FlagHistory, 5, 3, &fpA, "", entries("timeout")[:9]), false, 0, &fpA, lua.Failed, script},
		{"completed, another fingerprint", lua.AppendCompleted(nil, 3, 2, &fpB, now, now, []byte(`r`), ""), false, 0, &fpA, lua.Conflict, script},
		{"failed, another fingerprint", record(lua.StateFailed, lua.FlagHistory, 2, 1, &fpB, "", entries("x")), false, 0, &fpA, lua.Conflict, script},
		{"started, lease live", started, false, time.Hour + 20*time.Second, &fpA, lua.InProgress, script},
		{"started, lease run out", started, false, time.Hour - time.Second, &fpA, lua.TakenOver, script},
		{"retry", record(lua.StateRetry, lua.FlagHistory, 2, 1, &fpA, "", entries("flaky")), false, 0, &fpA, lua.Acquired, script},
		{"retry at max attempts", record(lua.StateRetry, lua.FlagHistory, 2, 3, &fpA, "", entries("flaky")), false, 0, &fpA, lua.Exhausted, script},
		{"forgotten", record(lua.StateForgotten, 0, 7, 0, nil, "", nil), false, 0, &fpA, lua.Acquired, script},
		{"text", []byte("hello"), false, 0, &fpA, lua.Corrupt, script},
		{"cut in its header", lua.AppendCompleted(nil, 1, 1, &fpA, now, now, nil, "")[:12], false, 0, &fpA, lua.Corrupt, script},
		{"a list", nil, true, 0, &fpA, lua.Corrupt, script},
		{"no record", nil, false, 0, &fpA, lua.Acquired, claim},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hinted, plain := "t:{hinted "+tc.name+"}", "t:{plain "+tc.name+"}"
			for _, k := range []string{hinted, plain} {
				ttl := tc.ttl
				if ttl == 0 {
					ttl = time.Hour
				}
				switch {
				case tc.list:
					if err := c.RPush(ctx, k, "a").Err(); err != nil {
						t.Fatal(err)
					}
				case tc.value != nil:
					if err := c.Set(ctx, k, tc.value, ttl).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			hook.take()
			got := begin(ctx, r, args, lua.BeginItem{Key: hinted, Owner: "me", Fingerprint: tc.fp, ReadFirst: true})[0]
			if sends := hook.take(); !slices.Equal(sends, tc.sends) {
				t.Errorf("the ReadFirst claim sent %v, want %v", sends, tc.sends)
			}
			want := begin(ctx, r, args, lua.BeginItem{Key: plain, Owner: "me", Fingerprint: tc.fp})[0]
			if got.Err != nil || want.Err != nil || got.Code != tc.code {
				t.Fatalf("ReadFirst answered %+v, the script %+v; want code %d", got, want, tc.code)
			}
			if got.Code == lua.InProgress { // the lease left, read a moment apart
				if got.Millis <= 0 || want.Millis <= 0 || got.Millis-want.Millis > 1000 || want.Millis-got.Millis > 1000 {
					t.Fatalf("lease left: ReadFirst %d ms, the script %d ms", got.Millis, want.Millis)
				}
				got.Millis, want.Millis = 0, 0
			}
			if got != want {
				t.Fatalf("ReadFirst answered\n  %+v\nthe script answered\n  %+v", got, want)
			}
			// The settled record was read, not written: it is as it was, TTL included.
			if tc.code == lua.Duplicate || tc.code == lua.Failed {
				if v, err := c.Get(ctx, hinted).Bytes(); err != nil || string(v) != string(tc.value) {
					t.Fatalf("the record changed to %q (%v)", v, err)
				}
				if ttl := c.TTL(ctx, hinted).Val(); ttl < 59*time.Minute {
					t.Fatalf("the TTL changed to %v", ttl)
				}
			}
		})
	}
}

// In a batch, the items marked ReadFirst are read, the others claimed with SET NX
// as usual; each is answered as the script would; a Start claim is never read.
func TestReadFirstInABatch(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := srv.Client(t)
	hook := &sent{}
	c.AddHook(hook)
	r := lua.NewRunner(c)
	ctx := context.Background()
	if err := r.Load(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	args := lua.BeginArgs{Lease: 30 * time.Second, Retention: time.Hour, MaxAttempts: 3, Now: now}
	fp := [16]byte{1}
	done := lua.AppendCompleted(nil, 2, 1, &fp, now, now, []byte("r"), "")
	for _, k := range []string{"t:{done1}", "t:{done2}"} {
		if err := c.Set(ctx, k, done, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	hook.take()
	reps := begin(ctx, r, args,
		lua.BeginItem{Key: "t:{done1}", Owner: "a", Fingerprint: &fp, ReadFirst: true},              // read: duplicate
		lua.BeginItem{Key: "t:{new1}", Owner: "b", Fingerprint: &fp, ReadFirst: true},               // read: missing, claimed
		lua.BeginItem{Key: "t:{new2}", Owner: "c", Fingerprint: &fp},                                // claimed
		lua.BeginItem{Key: "t:{done2}", Owner: "d", Fingerprint: &fp},                               // claimed: exists, script
		lua.BeginItem{Key: "t:{done2}", Owner: "e", Fingerprint: &fp, ReadFirst: true, Start: true}, // Start: not read
	)
	want := []lua.Code{lua.Duplicate, lua.Acquired, lua.Acquired, lua.Duplicate, lua.Duplicate}
	for i, rep := range reps {
		if rep.Err != nil || rep.Code != want[i] {
			t.Fatalf("item %d: %+v, want code %d", i, rep, want[i])
		}
	}
	if sends, wantSends := hook.take(), []string{"getex", "getex", "set", "set", "set", "set", "evalsha"}; !slices.Equal(sends, wantSends) {
		t.Fatalf("sent %v, want %v (a pipeline of GETs, a pipeline of SET NX, one script call)", sends, wantSends)
	}
	if reps[0].Data != "r" || reps[0].Fence != 2 || reps[3].Data != "r" {
		t.Fatalf("duplicates: %+v %+v", reps[0], reps[3])
	}
}

// The read-first read goes where the scripts go, to the primary: go-redis sends a
// command the server flags read-only to a replica when the client routes reads
// there (ReadOnly, RouteByLatency, RouteRandomly), and a lagging replica can still
// hold a record an operator has rerun or forgotten. GETEX is flagged a write.
func TestReadFirstReadIsNotRoutedToReplicas(t *testing.T) {
	c := testenv.Redis(t)
	cmds, err := c.Command(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	info, ok := cmds["getex"]
	if !ok {
		t.Fatal("the server does not know GETEX (Redis 6.2+)")
	}
	if info.ReadOnly {
		t.Fatalf("GETEX is flagged read-only (%v): go-redis would route the read-first read to replicas", info.Flags)
	}
}
