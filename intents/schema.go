package intents

import (
	"context"

	"github.com/outboxkit/outbox/migrations"
)

// checkSchema runs CheckSchema once per Client, before its first write: a
// database that was never migrated, or is at another version, fails every
// Consume and RecordTx with a *NotMigratedError (errors.Is ErrNotMigrated)
// before the handler runs. Once the schema was found current it is not
// checked again. It reads through the pool, never the caller's transaction,
// which a failed read would abort.
func (c *Client) checkSchema(ctx context.Context) error {
	if c.schemaOK.Load() {
		return nil
	}
	if err := CheckSchema(ctx, c.pool); err != nil {
		return err
	}
	c.schemaOK.Store(true)
	return nil
}

// ErrNotMigrated is matched (errors.Is) by the error CheckSchema returns
// for a database whose outbox schema is missing or not at the version this
// package needs. It is migrations.ErrNotMigrated.
var ErrNotMigrated = migrations.ErrNotMigrated

// NotMigratedError names the database's outbox schema version (0 when it
// was never migrated) and the version this package needs.
type NotMigratedError = migrations.NotMigratedError

// CheckSchema returns nil when the database behind db (a *pgxpool.Pool,
// *pgx.Conn or pgx.Tx) has the outbox schema this package needs, and a
// *NotMigratedError naming both versions and `outboxd migrate` when it has
// not. It reads one table and writes nothing. Call it at start-up so a
// database that was never migrated fails with that one clear error instead
// of "relation outbox_intents does not exist" on every message.
func CheckSchema(ctx context.Context, db migrations.Querier) error {
	return migrations.CheckSchema(ctx, db)
}
