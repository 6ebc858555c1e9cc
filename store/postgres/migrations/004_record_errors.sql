-- A record's last errors as two arrays, newest first (the message and its unix
-- second), in place of a JSON list: a claim or a settlement pushes an error inside
-- its one SQL statement with plain array operators.
ALTER TABLE idemkit_records
    ADD COLUMN errs   text[]   NOT NULL DEFAULT '{}',
    ADD COLUMN err_at bigint[] NOT NULL DEFAULT '{}';
UPDATE idemkit_records SET
    errs   = ARRAY(SELECT e->>'Message' FROM jsonb_array_elements(history) WITH ORDINALITY AS h(e, n) ORDER BY n),
    err_at = ARRAY(SELECT extract(epoch FROM (e->>'Time')::timestamptz)::bigint
                   FROM jsonb_array_elements(history) WITH ORDINALITY AS h(e, n) ORDER BY n)
WHERE history <> '[]';
ALTER TABLE idemkit_records DROP COLUMN history;
