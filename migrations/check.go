package migrations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrNotMigrated is matched (errors.Is) by every *NotMigratedError: the
// database's outbox schema is not at the version this binary embeds.
var ErrNotMigrated = errors.New("database schema is not current: run `outboxd migrate`")

// NotMigratedError says which outbox schema version a database is at and
// which one this binary needs. errors.Is(err, ErrNotMigrated) is true for
// it.
type NotMigratedError struct {
	// Current is the database's outbox schema version; 0 when it was never
	// migrated.
	Current int
	// Want is the version this binary embeds (Latest).
	Want int
}

func (e *NotMigratedError) Error() string {
	switch {
	case e.Current == 0:
		return fmt.Sprintf("no outbox schema (the database was never migrated): run `outboxd migrate` first (it creates schema version %d)", e.Want)
	case e.Current < e.Want:
		return fmt.Sprintf("outbox schema at version %d, older than the version %d this binary needs: run `outboxd migrate`", e.Current, e.Want)
	}
	return fmt.Sprintf("outbox schema at version %d, newer than the version %d this binary knows: upgrade outboxd, or roll the schema back with `outboxd migrate --down-to %d`", e.Current, e.Want, e.Want)
}

// Is reports whether target is ErrNotMigrated.
func (e *NotMigratedError) Is(target error) bool { return target == ErrNotMigrated }

// Querier is what CheckSchema needs of a connection: *pgxpool.Pool,
// *pgxpool.Conn, *pgx.Conn and pgx.Tx all have it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckSchema returns nil when the outbox schema of the database behind db
// is at Latest, and a *NotMigratedError (errors.Is ErrNotMigrated) naming
// the database's version and the wanted one when it is not: never
// migrated, older, or newer than this binary. Other errors (the database
// does not answer) are returned as they are. It reads only outbox_migration
// and writes nothing, so it is safe to call before anything else touches
// a database that may be the wrong one.
func CheckSchema(ctx context.Context, db Querier) error {
	current, err := SchemaVersion(ctx, db)
	if err != nil {
		return err
	}
	if want := Latest(); current != want {
		return &NotMigratedError{Current: current, Want: want}
	}
	return nil
}

// SchemaVersion returns the newest outbox schema version applied to the
// database behind db, or 0 when it was never migrated.
func SchemaVersion(ctx context.Context, db Querier) (int, error) {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('outbox_migration') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("read the outbox schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var current int
	if err := db.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM outbox_migration`).Scan(&current); err != nil {
		return 0, fmt.Errorf("read the outbox schema version: %w", err)
	}
	return current, nil
}
