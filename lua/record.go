package lua

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// Layout v1 of a record value (a Redis string). All integers are big-endian.
//
//	offset size  field
//	0      1     version<<4 | state (version 1; state 1 started, 2 completed, 3 failed, 4 retry,
//	             5 forgotten: an operator removed the record, and it keeps only its fence,
//	             its operator notes and its error history)
//	1      1     flags: 1 claimed under the key's lock, 2 permanent failure, 4 result dropped,
//	             8 fingerprint present, 16 error history present, 32 operator notes present,
//	             64 counted (started: the claim is an attempt; a takeover charges it)
//	2      4     fence
//	6      2     attempts
//	8      4     created, unix seconds (the writing worker's clock; informational)
//	12     4     updated, unix seconds (likewise)
//	16     16    fingerprint (flag 8): the first 16 bytes of the payload's SHA-256
//	then         operator notes (flag 32), in every state
//	then, by state:
//	started      1 owner length, owner, 6 retention in ms, [error history]
//	completed    the encoded result; with flag 4 instead the reason it was not kept
//	failed/retry error history (a failed record always has one, though it may be empty;
//	             a retry record may have none)
//	forgotten    [error history]
//
// Error history: 1 count, then count entries, newest first, each 4 time (unix
// seconds), 2 length, text. The newest is the last error (at most MaxErrorText
// bytes); older ones are cut to HistoryText bytes; at most HistoryLen are kept.
//
// Operator notes: the same shape (1 count, then newest first 4 time, 2 length,
// text), one note per operator transition ("unstick by alice: worker died"), each
// at most MaxNoteText bytes, the newest NotesLen kept: at most 1 + 8 * (6 + 1280) =
// 10,289 bytes. Every transition keeps them (a completion too), for as long as
// the record lives; a record that never had an operator's attention has no flag 32
// and not one byte of them.
//
// TTL: a started record lives lease + retention from its last claim or renewal, so
// its lease runs out, on the Redis server's clock, when its TTL falls to the
// retention recorded in it: lease left = PTTL - retention. A settled record lives
// at least the retention from its completion.
const (
	Version   = 1
	headerLen = 16
	fpLen     = 16
	retLen    = 6
	maxOwner  = 255
	// The limits every store keeps to (see consumer.MaxErrorText).
	HistoryLen   = consumer.HistoryLen
	MaxErrorText = consumer.MaxErrorText
	HistoryText  = consumer.HistoryText
	NotesLen     = consumer.NotesLen
	MaxNoteText  = consumer.MaxNoteText
)

// States of a record.
const (
	StateStarted   = 1
	StateCompleted = 2
	StateFailed    = 3
	StateRetry     = 4
	// StateForgotten is what an operator's forget leaves: no state to speak of, only
	// the fence high-water, so that the next claim's fence is still larger.
	StateForgotten = 5
)

// Flags of a record.
const (
	FlagLocked    = 1
	FlagPermanent = 2
	FlagDropped   = 4
	FlagFP        = 8
	FlagHistory   = 16
	FlagNotes     = 32
	FlagCounted   = 64
)

var stateNames = [...]string{"", "started", "completed", "failed", "retry", "forgotten"}

// AttemptError is one failed attempt's error, as a record keeps it.
type AttemptError struct {
	Time    time.Time
	Message string
}

// Note is one operator transition's note, as a record keeps it.
type Note struct {
	Time time.Time // the operator's clock, whole seconds
	Text string    // "<op> by <actor>: <reason>"
}

// Fields are a decoded record.
type Fields struct {
	State       int
	Flags       byte
	Fence       int64
	Attempts    int
	Created     time.Time
	Updated     time.Time
	Fingerprint [16]byte // zero without FlagFP
	Owner       string   // started only
	Retention   time.Duration
	History     []AttemptError
	Notes       []Note // operators' notes, newest first (FlagNotes)
	Result      []byte // completed: the result, or the reason it was dropped (FlagDropped)
}

// StateName is the state's name: started, completed, failed, retry or forgotten.
func (f *Fields) StateName() string { return stateNames[f.State] }

// ErrNotRecord says a value is not an idemkit record of a layout this version reads.
var ErrNotRecord = errors.New("lua: not an idemkit record")

// Decode parses a record value. It never panics: a value that is not a record
// (another program's, or cut short) gives an error wrapping ErrNotRecord that says
// what is wrong.
func Decode(v []byte) (Fields, error) {
	var f Fields
	bad := func(what string) (Fields, error) { return Fields{}, fmt.Errorf("%w: %s", ErrNotRecord, what) }
	if len(v) < headerLen {
		return bad(fmt.Sprintf("%d bytes, shorter than the %d-byte header", len(v), headerLen))
	}
	if v[0]>>4 != Version {
		return bad(fmt.Sprintf("layout version %d (this version reads %d)", v[0]>>4, Version))
	}
	f.State, f.Flags = int(v[0]&0x0f), v[1]
	if f.State < StateStarted || f.State > StateForgotten {
		return bad(fmt.Sprintf("unknown state %d", f.State))
	}
	f.Fence = int64(binary.BigEndian.Uint32(v[2:]))
	f.Attempts = int(binary.BigEndian.Uint16(v[6:]))
	f.Created = time.Unix(int64(binary.BigEndian.Uint32(v[8:])), 0)
	f.Updated = time.Unix(int64(binary.BigEndian.Uint32(v[12:])), 0)
	p := headerLen
	if f.Flags&FlagFP != 0 {
		if len(v) < p+fpLen {
			return bad("cut short in the fingerprint")
		}
		copy(f.Fingerprint[:], v[p:p+fpLen])
		p += fpLen
	}
	if f.Flags&FlagNotes != 0 {
		entries, n, err := decodeEntries(v[p:])
		if err != nil {
			return bad("operator notes " + err.Error())
		}
		f.Notes = make([]Note, len(entries))
		for i, e := range entries {
			f.Notes[i] = Note{Time: e.Time, Text: e.Message}
		}
		p += n
	}
	switch f.State {
	case StateStarted:
		if len(v) < p+1 || len(v) < p+1+int(v[p])+retLen {
			return bad("started record cut short in its owner or retention")
		}
		n := int(v[p])
		f.Owner = string(v[p+1 : p+1+n])
		p += 1 + n
		f.Retention = time.Duration(uint48(v[p:])) * time.Millisecond
		p += retLen
	case StateCompleted:
		f.Result = v[p:]
		return f, nil
	}
	if f.Flags&FlagHistory != 0 {
		h, _, err := decodeEntries(v[p:])
		if err != nil {
			return bad("error history " + err.Error())
		}
		f.History = h
	} else if f.State == StateFailed {
		return bad("failed record without an error history")
	}
	return f, nil
}

// decodeEntries reads an error history or a notes block (count, then time, length
// and text per entry) and how many bytes it takes.
func decodeEntries(v []byte) ([]AttemptError, int, error) {
	if len(v) < 1 {
		return nil, 0, errors.New("cut short")
	}
	n, p := int(v[0]), 1
	out := make([]AttemptError, 0, n)
	for i := 0; i < n; i++ {
		if len(v) < p+6 {
			return nil, 0, errors.New("cut short")
		}
		t := int64(binary.BigEndian.Uint32(v[p:]))
		l := int(binary.BigEndian.Uint16(v[p+4:]))
		p += 6
		if len(v) < p+l {
			return nil, 0, errors.New("cut short in a text")
		}
		out = append(out, AttemptError{Time: time.Unix(t, 0), Message: string(v[p : p+l])})
		p += l
	}
	return out, p, nil
}

func uint48(b []byte) int64 {
	return int64(binary.BigEndian.Uint16(b))<<32 | int64(binary.BigEndian.Uint32(b[2:]))
}

func putUint48(b []byte, v int64) {
	binary.BigEndian.PutUint16(b, uint16(v>>32))
	binary.BigEndian.PutUint32(b[2:], uint32(v))
}

// appendHeader appends a record header.
func appendHeader(b []byte, state int, flags byte, fence int64, attempts int, created, updated int64) []byte {
	b = append(b, byte(Version<<4|state), flags)
	b = binary.BigEndian.AppendUint32(b, uint32(fence))
	b = binary.BigEndian.AppendUint16(b, uint16(attempts))
	b = binary.BigEndian.AppendUint32(b, uint32(created))
	return binary.BigEndian.AppendUint32(b, uint32(updated))
}

// startedLen is the length of a fresh started record.
func startedLen(fp bool, owner string) int {
	n := headerLen + 1 + len(owner) + retLen
	if fp {
		n += fpLen
	}
	return n
}

// AppendStarted appends the value of a fresh claim: started, fence 1, attempt 1;
// counted when its handler starts with it.
func AppendStarted(b []byte, owner string, fp *[16]byte, locked, counted bool, retention time.Duration, now int64) []byte {
	var flags byte
	if locked {
		flags |= FlagLocked
	}
	if counted {
		flags |= FlagCounted
	}
	if fp != nil {
		flags |= FlagFP
	}
	b = appendHeader(b, StateStarted, flags, 1, 1, now, now)
	if fp != nil {
		b = append(b, fp[:]...)
	}
	b = append(b, byte(len(owner)))
	b = append(b, owner...)
	var r [retLen]byte
	putUint48(r[:], retention.Milliseconds())
	return append(b, r[:]...)
}

// AppendCompleted appends the value of a completed record. With dropped set, the
// result was not kept and dropped says why (its size, or "unencodable").
func AppendCompleted(b []byte, fence int64, attempts int, fp *[16]byte, created, now int64, result []byte, dropped string) []byte {
	var flags byte
	if fp != nil {
		flags |= FlagFP
	}
	if dropped != "" {
		flags |= FlagDropped
	}
	b = appendHeader(b, StateCompleted, flags, fence, attempts, created, now)
	if fp != nil {
		b = append(b, fp[:]...)
	}
	if dropped != "" {
		return append(b, dropped...)
	}
	return append(b, result...)
}
