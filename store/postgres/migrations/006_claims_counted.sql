-- Claims are not attempts: counted says the current claim of a started record is
-- an attempt (its handler started: the claim was sent with Start, or its owner
-- marked it so since). A takeover charges an attempt only for a counted claim.
-- Rows written by a version that does not name the column count, as every claim
-- did before: the default is true (a constant default adds the column without
-- rewriting the table); the Store writes the column at every claim.
ALTER TABLE idemkit_records ADD COLUMN counted boolean NOT NULL DEFAULT true;
ALTER TABLE idemkit_records_by_time ADD COLUMN counted boolean NOT NULL DEFAULT true;
