package intents

import (
	"context"

	"github.com/outboxkit/outbox/migrations"
)

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
