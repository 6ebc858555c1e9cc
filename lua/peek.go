package lua

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Record is a snapshot of one record, as peek read it.
type Record struct {
	Found bool
	// Corrupt says the key holds something that is not an idemkit record; Reason says what.
	Corrupt bool
	Reason  string
	// Now is the Redis server's clock at the read; TTL the key's time to live (-1: none).
	Now time.Time
	TTL time.Duration
	// LeaseUntil is when a started record's lease runs out on the server's clock
	// (its TTL less its retention); zero for other states.
	LeaseUntil time.Time
	// Raw is the value as stored.
	Raw []byte
	Fields
}

// Peek reads the record at key without changing it.
func (r *Runner) Peek(ctx context.Context, key string) (Record, error) {
	rep := r.exec(ctx, []call{{script: PeekScript, keys: []string{key}}})[0]
	if rep.err != nil {
		return Record{}, rep.err
	}
	row, ok := rep.val.([]any)
	if !ok || len(row) != 3 {
		return Record{}, fmt.Errorf("lua: peek: malformed reply %v", rep.val)
	}
	ttl, err1 := asInt(row[1])
	now, err2 := asInt(row[2])
	if err1 != nil || err2 != nil {
		return Record{}, fmt.Errorf("lua: peek: malformed reply %v", rep.val)
	}
	rec := Record{Now: time.UnixMilli(now), TTL: time.Duration(ttl) * time.Millisecond}
	v, _ := row[0].(string)
	switch {
	case ttl == -3:
		rec.Found, rec.Corrupt, rec.Reason = true, true, "key holds a value that is not a string"
		return rec, nil
	case row[0] == nil:
		return rec, nil
	}
	rec.Found, rec.Raw = true, []byte(v)
	f, err := Decode(rec.Raw)
	if err != nil {
		rec.Corrupt, rec.Reason = true, strings.TrimPrefix(err.Error(), "lua: ")
		return rec, nil
	}
	rec.Fields = f
	if f.State == StateStarted && ttl >= 0 {
		rec.LeaseUntil = rec.Now.Add(rec.TTL - f.Retention)
	}
	return rec, nil
}
