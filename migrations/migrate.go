// Package migrations holds the outbox's schema as embedded, versioned SQL and
// applies it, together with River's own migrations, to a database.
//
// Files are named NNN_name.up.sql and NNN_name.down.sql. Applied versions are
// recorded in outbox_migration. Up runs River's migrations and then ours in
// one transaction that holds an advisory lock, so running it twice is a no-op
// and two processes running it at once are serialised: the second waits, then
// finds nothing to do.
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed *.sql
var files embed.FS

// advisoryLockKey serialises migrators across processes. It is an arbitrary
// constant ("outbox" in ASCII) that other code is unlikely to use.
const advisoryLockKey int64 = 0x6f7574626f78

// Migration is one version of the outbox schema.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// All returns the embedded migrations in version order.
func All() []Migration {
	migrations, err := load(files)
	if err != nil {
		// The files are embedded at build time; a malformed set is a bug
		// caught by this package's tests.
		panic(err)
	}
	return migrations
}

// Latest is the newest embedded version.
func Latest() int {
	all := All()
	return all[len(all)-1].Version
}

func load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		name := e.Name()
		base, direction, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), ".")
		if !ok || (direction != "up" && direction != "down") {
			return nil, fmt.Errorf("migrations: %s is not named NNN_name.up.sql or NNN_name.down.sql", name)
		}
		num, label, _ := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if err != nil || version <= 0 {
			return nil, fmt.Errorf("migrations: %s does not start with a positive version number", name)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		m := byVersion[version]
		if m == nil {
			m = &Migration{Version: version, Name: label}
			byVersion[version] = m
		} else if m.Name != label {
			return nil, fmt.Errorf("migrations: version %d is both %q and %q", version, m.Name, label)
		}
		if direction == "up" {
			m.Up = string(body)
		} else {
			m.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migrations: version %d needs both an up and a down file", m.Version)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	// A gap is a migration file lost in a merge or a build: refuse to run
	// rather than skip a step of the schema.
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations: version %d is missing", i+1)
		}
	}
	return out, nil
}

// Migrator applies migrations to one database.
type Migrator struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
}

// New returns a Migrator. A nil logger discards logs. The pool needs at least
// two connections: one holds the advisory lock while River migrates on
// another.
func New(pool *pgxpool.Pool, logger *slog.Logger) *Migrator {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Migrator{pool: pool, logger: logger}
}

// Result lists what a call applied or rolled back.
type Result struct {
	// River is the River schema versions applied by this call.
	River []int
	// Outbox is the outbox schema versions applied (or rolled back).
	Outbox []int
}

// Up brings River's schema and then the outbox schema to their latest
// versions, each version in its own transaction, under a session advisory
// lock. A failed version is rolled back and stops the run; versions before
// it stay applied.
func (m *Migrator) Up(ctx context.Context) (Result, error) {
	var res Result
	err := m.locked(ctx, func(conn *pgxpool.Conn) error {
		// River's versions cannot share one transaction (one adds an enum
		// value the next uses), so River applies each in its own.
		riverMigrator, err := rivermigrate.New(riverpgxv5.New(m.pool), &rivermigrate.Config{Logger: m.logger})
		if err != nil {
			return err
		}
		riverRes, err := riverMigrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
		if err != nil {
			return fmt.Errorf("river migrations: %w", err)
		}
		for _, v := range riverRes.Versions {
			res.River = append(res.River, v.Version)
		}
		applied, err := appliedVersions(ctx, conn)
		if err != nil {
			return err
		}
		for _, mig := range All() {
			if applied[mig.Version] {
				continue
			}
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, mig.Up); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO outbox_migration (version, name) VALUES ($1, $2)`, mig.Version, mig.Name)
				return err
			})
			if err != nil {
				return fmt.Errorf("outbox migration %03d_%s: %w", mig.Version, mig.Name, err)
			}
			res.Outbox = append(res.Outbox, mig.Version)
			m.logger.InfoContext(ctx, "applied outbox migration", "version", mig.Version, "name", mig.Name)
		}
		return nil
	})
	return res, err
}

// DownTo rolls the outbox schema back to target (0 removes it all), newest
// first, each version in its own transaction, under the same lock as Up.
// River's schema is left alone: other code may use it.
func (m *Migrator) DownTo(ctx context.Context, target int) (Result, error) {
	var res Result
	if target < 0 || target > Latest() {
		return res, fmt.Errorf("migrations: target version %d is outside 0..%d", target, Latest())
	}
	err := m.locked(ctx, func(conn *pgxpool.Conn) error {
		applied, err := appliedVersions(ctx, conn)
		if err != nil {
			return err
		}
		all := All()
		for i := len(all) - 1; i >= 0; i-- {
			mig := all[i]
			if mig.Version <= target || !applied[mig.Version] {
				continue
			}
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, mig.Down); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `DELETE FROM outbox_migration WHERE version = $1`, mig.Version)
				return err
			})
			if err != nil {
				return fmt.Errorf("outbox migration %03d_%s down: %w", mig.Version, mig.Name, err)
			}
			res.Outbox = append(res.Outbox, mig.Version)
		}
		return nil
	})
	return res, err
}

// Check returns nil when the outbox schema is at Latest, and a
// *NotMigratedError (errors.Is ErrNotMigrated) naming both versions
// otherwise. It is CheckSchema on the Migrator's pool.
func (m *Migrator) Check(ctx context.Context) error {
	return CheckSchema(ctx, m.pool)
}

// locked runs fn holding a session advisory lock on a dedicated connection,
// so concurrent migrators, in this process or others, run one at a time.
func (m *Migrator) locked(ctx context.Context, fn func(*pgxpool.Conn) error) error {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrations: acquire connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, advisoryLockKey); err != nil {
		return fmt.Errorf("migrations: take advisory lock: %w", err)
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, advisoryLockKey); err != nil {
			// A connection whose unlock failed may still hold the lock.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	return fn(conn)
}

func appliedVersions(ctx context.Context, tx *pgxpool.Conn) (map[int]bool, error) {
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS outbox_migration (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return nil, fmt.Errorf("migrations: create version table: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT version FROM outbox_migration`)
	if err != nil {
		return nil, err
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, err
	}
	applied := make(map[int]bool, len(versions))
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}
