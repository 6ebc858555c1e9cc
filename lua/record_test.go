package lua_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/lua"
)

func TestRecordLayout(t *testing.T) {
	now := time.Now().Unix()
	fp := [16]byte{9, 8, 7}
	st, err := lua.Decode(lua.AppendStarted(nil, "owner-1", &fp, true, false, 90*time.Minute, now))
	if err != nil || st.State != lua.StateStarted || st.Fence != 1 || st.Attempts != 1 || st.Owner != "owner-1" ||
		st.Retention != 90*time.Minute || st.Fingerprint != fp || st.Flags&lua.FlagLocked == 0 || st.Created.Unix() != now {
		t.Fatalf("started: %+v %v", st, err)
	}
	done := lua.AppendCompleted(nil, 7, 3, nil, now-5, now, []byte(`{"id":1}`), "")
	c, err := lua.Decode(done)
	if err != nil || c.StateName() != "completed" || c.Fence != 7 || c.Attempts != 3 || string(c.Result) != `{"id":1}` ||
		c.Flags&lua.FlagFP != 0 || c.Created.Unix() != now-5 || c.Updated.Unix() != now {
		t.Fatalf("completed: %+v %v", c, err)
	}
	if len(done) != 16+8 {
		t.Fatalf("a completed record without fingerprint is %d bytes, want the 16-byte header and its result", len(done))
	}
	d, err := lua.Decode(lua.AppendCompleted(nil, 1, 1, &fp, now, now, nil, "2000000"))
	if err != nil || d.Flags&lua.FlagDropped == 0 || string(d.Result) != "2000000" {
		t.Fatalf("dropped: %+v %v", d, err)
	}
	// Operator notes (flag 32) come after the fingerprint, in every state.
	n, err := lua.Decode([]byte("\x12\x20\x00\x00\x00\x01\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00" +
		"\x01\x00\x00\x00\x2a\x00\x02hi" + "r"))
	if err != nil || n.StateName() != "completed" || len(n.Notes) != 1 || n.Notes[0].Text != "hi" || n.Notes[0].Time.Unix() != 42 ||
		string(n.Result) != "r" {
		t.Fatalf("notes: %+v %v", n, err)
	}
	for _, bad := range [][]byte{nil, []byte("short"), []byte(strings.Repeat("\x00", 16)), done[:10]} {
		if _, err := lua.Decode(bad); !errors.Is(err, lua.ErrNotRecord) {
			t.Fatalf("Decode(%q) = %v, want ErrNotRecord", bad, err)
		}
	}
}

// Decode never panics, whatever the bytes.
func FuzzDecode(f *testing.F) {
	now := time.Now().Unix()
	f.Add(lua.AppendStarted(nil, "o", &[16]byte{1}, false, true, time.Hour, now))
	f.Add(lua.AppendCompleted(nil, 2, 1, nil, now, now, []byte("r"), ""))
	f.Add([]byte("\x12\x20\x00\x00\x00\x01\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x02hir"))
	f.Add([]byte("\x13\x10\x00\x00\x00\x01\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x02hi"))
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := lua.Decode(v)
		if err == nil && (r.State < lua.StateStarted || r.State > lua.StateForgotten) {
			t.Fatalf("decoded a record in state %d", r.State)
		}
	})
}
