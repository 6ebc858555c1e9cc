-- Room on each page of the record table for a row's next version: a claim inserts
-- a row and its completion updates it at once, and an update whose new version
-- fits on the row's page, changing no indexed column, is a heap-only tuple (HOT)
-- update: none of the table's three indexes is written again. At the default
-- fillfactor (100) the claims fill every page, so each completion wrote all three
-- indexes. Applies to pages written from now on.
ALTER TABLE idemkit_records SET (fillfactor = 50);
