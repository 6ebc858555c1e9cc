-- The schema's first file: nothing but a comment table, so later files (the
-- completions table, the record table) each add one concern.
COMMENT ON TABLE idemkit_schema_migrations IS 'idemkit: schema files applied by postgres.Migrate';
