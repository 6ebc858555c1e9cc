package postgres

// The operator's statements: one operator transition (operateSQL), a batched
// read (peekManySQL) and a scan page (scanScopeSQL, scanAllSQL). Like the
// Store's others they are written on idemkit_records and run on the store's
// table (statementsOn).

// operateSQL: $1 key hash, $2 op (unstick, forget, rerun), $3 the fence the
// operator saw (0: any), $4 retention ms, $5 the note, $6 the note's unix second,
// $7 how many notes a record keeps. One statement: the live row is locked, the
// decision made from it (moved: the fence is not $3; apply; wrong: the state does
// not allow the op), and the row changed when it applies. No row answered: no
// live record.
//
//	unstick  started -> retry at fence+1, the abandoned attempt not counted
//	forget   any state but forgotten -> forgotten: the fence, the error history
//	         and the notes kept; the next claim starts afresh (claimSQL's afresh)
//	rerun    completed or failed -> retry with no attempt counted, the result
//	         dropped, the fingerprint kept
//
// Each clears the claim's counted mark and puts the note first in the notes;
// forget and rerun leave the record at least the retention to live.
const operateSQL = `WITH clock AS MATERIALIZED (
	SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), cur AS MATERIALIZED (
	SELECT r.key_hash, r.state, r.fence, r.lease_ms, clock.now,
		CASE
			WHEN $3::bigint <> 0 AND r.fence <> $3::bigint THEN 'moved'
			WHEN $2::text = 'unstick' AND r.state = 'started' OR $2::text = 'forget' AND r.state <> 'forgotten'
				OR $2::text = 'rerun' AND r.state IN ('completed', 'failed') THEN 'apply'
			ELSE 'wrong'
		END AS d
	FROM idemkit_records r CROSS JOIN clock
	WHERE r.key_hash = $1::bytea AND r.expires_ms > clock.now
	FOR UPDATE OF r
), upd AS (
	UPDATE idemkit_records t SET
		state = CASE WHEN $2::text = 'forget' THEN 'forgotten' ELSE 'retry' END,
		owner = '', locked = false, lease_ms = 0, counted = false,
		fence = CASE WHEN $2::text = 'unstick' THEN t.fence + 1 ELSE t.fence END,
		attempts = CASE WHEN $2::text = 'unstick' THEN greatest(t.attempts - 1, 0) ELSE 0 END,
		fp = CASE WHEN $2::text = 'forget' THEN NULL ELSE t.fp END,
		result = CASE WHEN $2::text = 'unstick' THEN t.result END,
		dropped = CASE WHEN $2::text = 'unstick' THEN t.dropped ELSE '' END,
		permanent = CASE WHEN $2::text = 'unstick' THEN t.permanent ELSE false END,
		expires_ms = CASE WHEN $2::text = 'unstick' THEN c.now + $4::bigint ELSE greatest(t.expires_ms, c.now + $4::bigint) END,
		updated_ms = c.now, written_ms = c.now,
		notes = ARRAY[$5::text] || t.notes[1:$7::int - 1],
		note_at = ARRAY[$6::bigint] || t.note_at[1:$7::int - 1]
	FROM cur c
	WHERE t.key_hash = c.key_hash AND c.d = 'apply'
	RETURNING t.fence
)
SELECT c.d, c.state, c.fence, c.lease_ms, c.now, coalesce((SELECT u.fence FROM upd u), c.fence) FROM cur c`

// recordColumns are what an operator reads of a row r: its state and every field
// the admin record shows, and its notes.
const recordColumns = `r.state, r.owner, r.fence, r.attempts, r.fp, r.lease_ms, r.result, r.dropped, r.errs, r.err_at,
	r.permanent, r.locked, r.counted, r.created_ms, r.updated_ms, r.expires_ms, r.notes, r.note_at`

// peekManySQL: $1 key hashes. A row per item, in order: the server's clock and
// the row's columns (NULL when there is no row).
const peekManySQL = `WITH clock AS MATERIALIZED (
	SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
)
SELECT clock.now, ` + recordColumns + `
FROM unnest($1::bytea[]) WITH ORDINALITY AS c(k, i) CROSS JOIN clock
LEFT JOIN idemkit_records r ON r.key_hash = c.k
ORDER BY c.i`

// scanScopeSQL: $1 scope, $2 the last key of the page before (empty to start),
// $3 page size. A page of one scope's rows in key order, read from the scan index
// from where the page before ended (keyset paging: no offset, no sort); expired
// rows are in it, for the caller to skip, so that a page examines $3 rows at
// most. Rows written before the key column are not listed.
const scanScopeSQL = `WITH clock AS MATERIALIZED (
	SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
)
SELECT clock.now, r.scope, r.key, ` + recordColumns + `
FROM idemkit_records r CROSS JOIN clock
WHERE r.scope = $1::text AND r.key > $2::bytea AND r.key IS NOT NULL
ORDER BY r.key
LIMIT $3::int`

// scanAllSQL: $1 and $2 the last scope and key of the page before ("" and empty
// to start), $3 page size. scanScopeSQL over every scope, in scope and key order.
const scanAllSQL = `WITH clock AS MATERIALIZED (
	SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
)
SELECT clock.now, r.scope, r.key, ` + recordColumns + `
FROM idemkit_records r CROSS JOIN clock
WHERE (r.scope, r.key) > ($1::text, $2::bytea) AND r.key IS NOT NULL
ORDER BY r.scope, r.key
LIMIT $3::int`
