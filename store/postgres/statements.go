package postgres

import "strings"

// The Store's statements. A call of the Store is one of them, whatever the
// batch's size (one round trip, its own implicit transaction), except a claim in
// which some keys have rows: a plain insert claims the new keys, and the claim
// statement the others (two round trips). Keys
// come as arrays (unnest ... WITH ORDINALITY numbers the items) and are distinct
// within one statement; the Store sends a batch that names a key twice as
// several statements, in order. Times are milliseconds of the server's clock
// (clock_timestamp(), read once per statement); a row whose expires_ms has passed
// reads as absent.
//
// Locking: a claim must decide from a row that cannot change before it writes, so
// the claim statement first locks the batch's existing rows (FOR UPDATE, in key
// order, which under READ COMMITTED also yields each row's newest committed
// version) and only then updates them; keys with no row are inserted with ON
// CONFLICT DO NOTHING, so a concurrent claim that inserted the same key first
// wins and this one is sent again for that key, when it sees the row. The other
// statements are compare-and-set updates (owner, state, expiry in the WHERE
// clause, re-checked by PostgreSQL on the newest version of a row another
// transaction changed meanwhile), so they need no read first. On the
// time-partitioned table, whose primary key includes the write time, ON CONFLICT
// cannot find another claim's row of the same key: there the claim statement runs
// behind its keys' advisory locks (Store.run with lock), and every write sets
// written_ms, the partition key.

// statements are the Store's statements on one table: idemkit_records, or the
// time-partitioned idemkit_records_by_time.
type statements struct {
	insert, claim, settle, complete, extend, release, state, peek string
	// the operator's (operator_statements.go)
	operate, peekMany, scanAll, scanScope string
}

func statementsOn(table string) statements {
	on := func(sql string) string { return strings.ReplaceAll(sql, "idemkit_records", table) }
	return statements{insert: on(insertSQL), claim: on(claimSQL), settle: on(settleSQL), complete: on(completeSQL),
		extend: on(extendSQL), release: on(releaseSQL), state: on(stateSQL), peek: on(peekSQL),
		operate: on(operateSQL), peekMany: on(peekManySQL), scanAll: on(scanAllSQL), scanScope: on(scanScopeSQL)}
}

// insertSQL: $1 key hashes, $2 owners, $3 fingerprints (NULL when off), $4
// claimed under a lock, $5 lease ms, $6 retention ms, $7 scope, $8 counted (the
// claim's Start), $9 keys. The claim of keys that have no row, the common case, in
// a plain insert: a row per key inserted (its hash and its creation time). The
// other keys (a row is there, live or expired) go to claimSQL.
const insertSQL = `INSERT INTO idemkit_records (key_hash, scope, state, owner, fence, attempts, fp, lease_ms, locked,
	counted, created_ms, updated_ms, expires_ms, written_ms, key)
SELECT c.k, $7, 'started', c.c_owner, 1, 1, c.c_fp, clock.now + $5, c.c_locked, c.c_start, clock.now, clock.now,
	clock.now + $5 + $6, clock.now, c.c_key
FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now) clock,
	unnest($1::bytea[], $2::text[], $3::bytea[], $4::bool[], $8::bool[], $9::bytea[]) AS c(k, c_owner, c_fp, c_locked, c_start, c_key)
ORDER BY c.k
ON CONFLICT (key_hash) DO NOTHING
RETURNING key_hash, created_ms`

// claimSQL: $1 key hashes, $2 owners, $3 fingerprints (NULL when off), $4 claimed
// under a lock, $5 lease ms, $6 retention ms, $7 max attempts, $8 scope, $9
// counted (the claim's Start), $10 keys. One row per item: its index, the
// decision, whether it took effect (false only when a concurrent claim inserted
// the key first), and the record after the claim.
//
// Decisions, as the memory and Redis stores make them: fresh (no live row: a new
// record; an expired row's operator notes go with it), afresh (a record an
// operator forgot: a new record at the next fence, its notes kept), conflict (another fingerprint), completed, failed, exhaust (a retry
// with no attempt left), claim (a retry), own (the caller's claim, asked again;
// sent with Start, it marks the claim counted), busy (a live lease), expire (a
// counted claim whose lease ran out on the last attempt: failed, with an error),
// takeover (attempts+1 when the claim taken over was counted, unchanged when it
// was not). A claim is counted when it was sent with Start.
//
// Before a key's attempts are reported used up (exhaust, expire, or a failed
// record that was not failed as permanent), the key's row in idemkit_completions
// is looked up: when InTx committed the effect with it, the record is completed
// with its result instead (recover), and the claim answers completed. The lookup
// is a subquery inside a CASE, so that it runs, one index probe, only for those
// items (a join would let the planner scan the completion table at every claim).
const claimSQL = `WITH clock AS MATERIALIZED (
	SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), cur AS MATERIALIZED (
	SELECT * FROM idemkit_records WHERE key_hash = ANY($1::bytea[]) ORDER BY key_hash FOR UPDATE
), src AS MATERIALIZED (
	SELECT c.i, c.k, c.c_owner, c.c_fp, c.c_locked, c.c_start, c.c_key, clock.now, r.key_hash IS NOT NULL AS present, r.*,
		CASE
			WHEN r.key_hash IS NULL OR r.expires_ms <= clock.now THEN 'fresh'
			WHEN r.state = 'forgotten' THEN 'afresh'
			WHEN c.c_fp IS NOT NULL AND r.fp IS NOT NULL AND r.fp <> c.c_fp THEN 'conflict'
			WHEN r.state = 'completed' THEN 'completed'
			WHEN r.state = 'failed' THEN 'failed'
			WHEN r.state = 'retry' AND r.attempts >= $7 THEN 'exhaust'
			WHEN r.state = 'retry' THEN 'claim'
			WHEN r.owner = c.c_owner THEN 'own'
			WHEN r.lease_ms > clock.now AND NOT (c.c_locked AND r.locked) THEN 'busy'
			WHEN r.counted AND r.attempts >= $7 THEN 'expire'
			ELSE 'takeover'
		END AS d0
	FROM unnest($1::bytea[], $2::text[], $3::bytea[], $4::bool[], $9::bool[], $10::bytea[])
		WITH ORDINALITY AS c(k, c_owner, c_fp, c_locked, c_start, c_key, i)
	CROSS JOIN clock
	LEFT JOIN cur r ON r.key_hash = c.k
), dec AS MATERIALIZED (
	SELECT s.*, CASE WHEN s.d0 IN ('exhaust', 'expire') OR s.d0 = 'failed' AND NOT s.permanent
		THEN (SELECT ARRAY[p.result] FROM idemkit_completions p WHERE p.key_hash = s.k) END AS done
	FROM src s
), nxt AS MATERIALIZED (
	SELECT s.i, s.k, s.d, s.present, s.now, s.c_key AS key,
		s.d IN ('fresh', 'afresh', 'claim', 'takeover') AS claims,
		s.d IN ('exhaust', 'expire', 'recover') AS ends,
		s.d = 'own' AND s.c_start AND NOT s.counted AS marks,
		CASE WHEN s.d IN ('fresh', 'afresh', 'claim', 'takeover') THEN 'started' WHEN s.d IN ('exhaust', 'expire') THEN 'failed'
			WHEN s.d = 'recover' THEN 'completed' ELSE s.state END AS state,
		CASE WHEN s.d IN ('fresh', 'afresh', 'claim', 'takeover') THEN s.c_owner WHEN s.d IN ('exhaust', 'expire', 'recover') THEN '' ELSE s.owner END AS owner,
		CASE WHEN s.d = 'fresh' THEN 1 WHEN s.d IN ('afresh', 'claim', 'takeover') THEN s.fence + 1 ELSE s.fence END AS fence,
		CASE WHEN s.d IN ('fresh', 'afresh') THEN 1 WHEN s.d = 'claim' OR s.d = 'takeover' AND s.counted THEN s.attempts + 1
			ELSE s.attempts END AS attempts,
		CASE WHEN s.d IN ('fresh', 'afresh') THEN s.c_fp WHEN s.d IN ('claim', 'takeover') THEN coalesce(s.fp, s.c_fp) ELSE s.fp END AS fp,
		CASE WHEN s.d IN ('fresh', 'afresh', 'claim', 'takeover') THEN s.now + $5 WHEN s.d IN ('exhaust', 'expire', 'recover') THEN 0
			ELSE s.lease_ms END AS lease_ms,
		CASE WHEN s.d IN ('fresh', 'afresh') THEN NULL WHEN s.d = 'recover' THEN s.done[1] ELSE s.result END AS result,
		CASE WHEN s.d IN ('fresh', 'afresh', 'recover') THEN '' ELSE s.dropped END AS dropped,
		CASE WHEN s.d IN ('fresh', 'afresh', 'recover') THEN '{}'::text[]
			WHEN s.d = 'expire' THEN ARRAY['lease expired during the last allowed attempt']
				|| CASE WHEN cardinality(s.errs) > 0 THEN ARRAY[left(s.errs[1], 256)] || s.errs[2:3] ELSE '{}'::text[] END
			ELSE s.errs END AS errs,
		CASE WHEN s.d IN ('fresh', 'afresh', 'recover') THEN '{}'::bigint[]
			WHEN s.d = 'expire' THEN ARRAY[s.now / 1000] || s.err_at[1:3]
			ELSE s.err_at END AS err_at,
		CASE WHEN s.d IN ('fresh', 'afresh', 'exhaust', 'expire', 'recover') THEN false ELSE s.permanent END AS permanent,
		CASE WHEN s.d IN ('fresh', 'afresh', 'claim', 'takeover') THEN s.c_locked WHEN s.d IN ('exhaust', 'expire', 'recover') THEN false
			ELSE s.locked END AS locked,
		CASE WHEN s.d IN ('fresh', 'afresh', 'claim', 'takeover') THEN s.c_start ELSE s.counted OR s.d = 'own' AND s.c_start END AS counted,
		CASE WHEN s.d IN ('fresh', 'afresh') THEN s.now ELSE s.created_ms END AS created_ms,
		CASE WHEN s.d IN ('fresh', 'afresh', 'claim', 'takeover', 'exhaust', 'expire', 'recover')
			OR s.d = 'own' AND s.c_start AND NOT s.counted THEN s.now ELSE s.updated_ms END AS updated_ms,
		CASE WHEN s.d IN ('fresh', 'afresh', 'claim', 'takeover') THEN s.now + $5 + $6 WHEN s.d IN ('exhaust', 'expire', 'recover') THEN s.now + $6
			ELSE s.expires_ms END AS expires_ms,
		CASE WHEN s.d = 'fresh' THEN '{}'::text[] ELSE s.notes END AS notes,
		CASE WHEN s.d = 'fresh' THEN '{}'::bigint[] ELSE s.note_at END AS note_at
	FROM (SELECT *, CASE WHEN done IS NOT NULL THEN 'recover' ELSE d0 END AS d FROM dec) s
), upd AS (
	UPDATE idemkit_records t SET state = n.state, owner = n.owner, fence = n.fence, attempts = n.attempts, fp = n.fp,
		lease_ms = n.lease_ms, result = n.result, dropped = n.dropped, errs = n.errs, err_at = n.err_at,
		permanent = n.permanent, locked = n.locked, counted = n.counted, created_ms = n.created_ms,
		updated_ms = n.updated_ms, expires_ms = n.expires_ms, written_ms = n.now, key = n.key, notes = n.notes,
		note_at = n.note_at
	FROM nxt n
	WHERE t.key_hash = n.k AND n.present AND (n.claims OR n.ends OR n.marks)
), ins AS (
	INSERT INTO idemkit_records (key_hash, scope, state, owner, fence, attempts, fp, lease_ms, result, dropped, errs,
		err_at, permanent, locked, counted, created_ms, updated_ms, expires_ms, written_ms, key)
	SELECT n.k, $8, n.state, n.owner, n.fence, n.attempts, n.fp, n.lease_ms, n.result, n.dropped, n.errs, n.err_at,
		n.permanent, n.locked, n.counted, n.created_ms, n.updated_ms, n.expires_ms, n.now, n.key
	FROM nxt n WHERE NOT n.present ORDER BY n.k
	ON CONFLICT DO NOTHING
	RETURNING key_hash
)
SELECT n.i, n.d, n.present OR ins.key_hash IS NOT NULL, n.fence, n.attempts, n.lease_ms, n.now, n.created_ms, n.fp,
	n.result, n.dropped, coalesce(n.errs[1], ''), n.permanent
FROM nxt n LEFT JOIN ins ON ins.key_hash = n.k`

// settleSQL: $1 key hashes, $2 owners, $3 complete, $4 results, $5 dropped, $6
// error messages, $7 permanent, $8 retention ms, $9 max attempts. A row per item
// settled: its index and the state it set. The items without one (their owner no
// longer held the claim, or the call was sent again after a lost reply) are looked
// up with stateSQL.
const settleSQL = `WITH clock AS MATERIALIZED (
	SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), c AS MATERIALIZED (
	SELECT * FROM unnest($1::bytea[], $2::text[], $3::bool[], $4::bytea[], $5::text[], $6::text[], $7::bool[])
		WITH ORDINALITY AS c(k, c_owner, complete, c_result, c_dropped, msg, perm, i)
)
UPDATE idemkit_records t SET
	expires_ms = CASE WHEN t.lease_ms <= clock.now THEN clock.now + $8 ELSE t.expires_ms END,
	lease_ms = 0, updated_ms = clock.now, written_ms = clock.now, owner = '', locked = false,
	state = CASE WHEN c.complete THEN 'completed' WHEN c.perm OR t.attempts >= $9 THEN 'failed' ELSE 'retry' END,
	result = CASE WHEN NOT c.complete THEN t.result WHEN c.c_dropped = '' THEN c.c_result END,
	dropped = CASE WHEN c.complete THEN c.c_dropped ELSE t.dropped END,
	permanent = CASE WHEN NOT c.complete AND (c.perm OR t.attempts >= $9) THEN c.perm ELSE t.permanent END,
	errs = CASE WHEN c.complete THEN '{}'::text[]
		ELSE ARRAY[c.msg] || CASE WHEN cardinality(t.errs) > 0 THEN ARRAY[left(t.errs[1], 256)] || t.errs[2:3] ELSE '{}'::text[] END END,
	err_at = CASE WHEN c.complete THEN '{}'::bigint[] ELSE ARRAY[clock.now / 1000] || t.err_at[1:3] END
FROM c, clock
WHERE t.key_hash = c.k AND t.owner = c.c_owner AND (t.state = 'started' AND t.expires_ms > clock.now) IS TRUE
RETURNING c.i, t.state`

// completeSQL: settleSQL for a round in which every item completes, the common
// case, with less to send and to compute: $1 key hashes, $2 owners, $3 results, $4
// dropped, $5 retention ms.
const completeSQL = `WITH clock AS MATERIALIZED (
	SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), c AS MATERIALIZED (
	SELECT * FROM unnest($1::bytea[], $2::text[], $3::bytea[], $4::text[]) WITH ORDINALITY AS c(k, c_owner, c_result, c_dropped, i)
)
UPDATE idemkit_records t SET
	expires_ms = CASE WHEN t.lease_ms <= clock.now THEN clock.now + $5 ELSE t.expires_ms END,
	lease_ms = 0, updated_ms = clock.now, written_ms = clock.now, owner = '', locked = false, state = 'completed',
	result = CASE WHEN c.c_dropped = '' THEN c.c_result END, dropped = c.c_dropped, errs = '{}', err_at = '{}'
FROM c, clock
WHERE t.key_hash = c.k AND t.owner = c.c_owner AND (t.state = 'started' AND t.expires_ms > clock.now) IS TRUE
RETURNING c.i, t.state`

// extendSQL: $1 key hashes, $2 owners, $3 lease ms, $4 retention ms. A row per
// item renewed: its index.
const extendSQL = `WITH clock AS MATERIALIZED (
	SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), c AS MATERIALIZED (
	SELECT * FROM unnest($1::bytea[], $2::text[]) WITH ORDINALITY AS c(k, c_owner, i)
)
UPDATE idemkit_records t SET lease_ms = clock.now + $3, expires_ms = clock.now + $3 + $4, written_ms = clock.now
FROM c, clock
WHERE t.key_hash = c.k AND t.owner = c.c_owner AND (t.state = 'started' AND t.expires_ms > clock.now) IS TRUE
RETURNING c.i`

// releaseSQL: $1 key hashes, $2 owners, $3 retention ms. A row per item released:
// its index. The others are looked up with stateSQL (a release sent again after a
// lost reply finds a retry row with the claim's fence).
const releaseSQL = `WITH clock AS MATERIALIZED (
	SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), c AS MATERIALIZED (
	SELECT * FROM unnest($1::bytea[], $2::text[]) WITH ORDINALITY AS c(k, c_owner, i)
)
UPDATE idemkit_records t SET state = 'retry', owner = '', locked = false, lease_ms = 0, updated_ms = clock.now,
	written_ms = clock.now,
	expires_ms = clock.now + $3, attempts = greatest(t.attempts - 1, 0)
FROM c, clock
WHERE t.key_hash = c.k AND t.owner = c.c_owner AND (t.state = 'started' AND t.expires_ms > clock.now) IS TRUE
RETURNING c.i`

// stateSQL: $1 key hashes. The live rows' state and fence, to answer calls that
// changed nothing: sent again after a lost reply, or by an owner that lost its
// claim.
const stateSQL = `SELECT key_hash, state, fence FROM idemkit_records
WHERE key_hash = ANY($1::bytea[]) AND expires_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint`

// peekSQL: $1 the key hash. The server's clock, and the row when there is one.
const peekSQL = `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint, r.state, r.owner, r.fence, r.attempts, r.fp,
	r.lease_ms, r.result, r.dropped, r.errs, r.err_at, r.permanent, r.locked, r.counted, r.created_ms, r.updated_ms,
	r.expires_ms
FROM (SELECT 1) one LEFT JOIN idemkit_records r ON r.key_hash = $1`
