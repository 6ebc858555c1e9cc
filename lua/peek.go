package lua

import (
	"context"
	"fmt"
	"strconv"
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
	// Fields are the raw hash fields (see the package doc for their names).
	Fields map[string]string

	State       string
	Owner       string
	Fence       int64
	Attempts    int
	Fingerprint string
	LeaseUntil  time.Time // zero when no attempt runs
	Result      string
	Dropped     string
	Error       string
	Kind        string
	Locked      bool // the current claim was made under the key's distributed lock
	Created     time.Time
	Updated     time.Time
}

// Peek reads the record at key without changing it.
func (r *Runner) Peek(ctx context.Context, key string) (Record, error) {
	rep := r.exec(ctx, []call{{script: PeekScript, keys: []string{key}}})[0]
	if rep.err != nil {
		return Record{}, rep.err
	}
	row, ok := rep.val.([]any)
	if !ok || len(row) < 3 {
		return Record{}, fmt.Errorf("lua: peek: malformed reply %v", rep.val)
	}
	code, err1 := asInt(row[0])
	now, err2 := asInt(row[1])
	ttl, err3 := asInt(row[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return Record{}, fmt.Errorf("lua: peek: malformed reply %v", rep.val)
	}
	rec := Record{Now: time.UnixMilli(now), TTL: time.Duration(ttl) * time.Millisecond}
	switch code {
	case 0:
		return rec, nil
	case 8:
		rec.Found, rec.Corrupt, rec.Reason = true, true, "key holds a value that is not an idemkit record"
		return rec, nil
	}
	rec.Found = true
	rec.Fields = make(map[string]string, (len(row)-3)/2)
	for i := 3; i+1 < len(row); i += 2 {
		k, _ := row[i].(string)
		v, _ := row[i+1].(string)
		rec.Fields[k] = v
	}
	rec.parse()
	return rec, nil
}

func (rec *Record) parse() {
	f := rec.Fields
	rec.State, rec.Owner, rec.Fingerprint = f["s"], f["o"], f["p"]
	rec.Result, rec.Error, rec.Kind = f["r"], f["e"], f["k"]
	switch rec.State {
	case "started", "completed", "failed", "retry":
	case "":
		rec.Corrupt, rec.Reason = true, "hash at key has no state field"
		return
	default:
		rec.Corrupt, rec.Reason = true, "unknown state "+strconv.Quote(rec.State)
		return
	}
	var err error
	if rec.Fence, err = strconv.ParseInt(f["f"], 10, 64); err != nil {
		rec.Corrupt, rec.Reason = true, "record has no numeric fence"
		return
	}
	if rec.Attempts, err = strconv.Atoi(f["a"]); err != nil {
		rec.Corrupt, rec.Reason = true, "record has no numeric attempts"
		return
	}
	rec.Dropped, rec.Locked = f["d"], f["lk"] == "1"
	if ms, _ := strconv.ParseInt(f["l"], 10, 64); ms > 0 && rec.State == "started" {
		rec.LeaseUntil = time.UnixMilli(ms)
	}
	if ms, _ := strconv.ParseInt(f["c"], 10, 64); ms > 0 {
		rec.Created = time.UnixMilli(ms)
	}
	rec.Updated = rec.Created
	if ms, _ := strconv.ParseInt(f["u"], 10, 64); ms > 0 {
		rec.Updated = time.UnixMilli(ms)
	}
}
