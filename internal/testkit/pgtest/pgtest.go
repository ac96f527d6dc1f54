// Package pgtest gives each test a fresh, migrated PostgreSQL database of its
// own, dropped when the test ends, so tests run in parallel against a real
// server and leave nothing behind.
//
// The server is taken from TEST_DATABASE_URL, then DATABASE_URL, then the
// local default. The first test in a run builds a template database with the
// current schema (under an advisory lock, so parallel test binaries build it
// once); each test then clones it with CREATE DATABASE ... TEMPLATE, which
// takes tens of milliseconds.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/outboxkit/outbox/internal/testkit/pgadmin"
	"github.com/outboxkit/outbox/migrations"
)

// DefaultURL is the server tests use when neither TEST_DATABASE_URL nor
// DATABASE_URL is set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// ServerURL returns the URL of the server tests run against.
func ServerURL() string {
	for _, name := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(name); v != "" {
			return v
		}
	}
	return DefaultURL
}

// WithDatabase returns serverURL with its database name replaced by name.
func WithDatabase(serverURL, name string) (string, error) {
	return pgadmin.WithDatabase(serverURL, name)
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// Template returns the name of the migrated template database, building it
// on first use. It panics if it cannot: callers are tests and examples.
func Template() string {
	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(context.Background()) })
	if templateErr != nil {
		panic("pgtest: build template database: " + templateErr.Error())
	}
	return templateName
}

// NewDB creates a fresh database with the current schema and returns a pool
// connected to it and its URL. Both are cleaned up when t ends.
func NewDB(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(ctx) })
	if templateErr != nil {
		t.Fatalf("pgtest: build template database: %v", templateErr)
	}
	name := "outbox_test_" + randomSuffix()
	if err := CreateDatabase(ctx, name, templateName); err != nil {
		// A run with another schema (another branch's checkout) may have
		// dropped the template since: build it again, once.
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
			t.Fatalf("pgtest: %v", err)
		}
		if _, err := ensureTemplate(ctx); err != nil {
			t.Fatalf("pgtest: rebuild template database: %v", err)
		}
		if err := CreateDatabase(ctx, name, templateName); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	return connect(t, name)
}

// connect opens a pool on the test server's database name, closed and the
// database dropped when t ends.
func connect(t testing.TB, name string) (*pgxpool.Pool, string) {
	t.Helper()
	dbURL, err := WithDatabase(ServerURL(), name)
	if err != nil {
		t.Fatal(err)
	}
	poolConfig, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	// Room for a dispatcher's workers and a test's own queries.
	poolConfig.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), poolConfig)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", name, err)
	}
	t.Cleanup(func() {
		pool.Close()
		if err := DropDatabase(context.Background(), name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return pool, dbURL
}

// ExampleDB creates a fresh database with the current schema for an
// example (which has no testing.T), and returns a pool on it and a cleanup
// that closes the pool and drops the database. It panics if it cannot.
func ExampleDB() (*pgxpool.Pool, func()) {
	ctx := context.Background()
	name := "outbox_example_" + randomSuffix()
	if err := CreateDatabase(ctx, name, Template()); err != nil {
		panic(err)
	}
	dbURL, err := WithDatabase(ServerURL(), name)
	if err != nil {
		panic(err)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		panic(err)
	}
	return pool, func() {
		pool.Close()
		_ = DropDatabase(context.Background(), name)
	}
}

// NewEmptyDB creates a fresh database with no schema at all (what a
// newcomer's first database looks like) and returns a pool connected to it
// and its URL. Both are cleaned up when t ends.
func NewEmptyDB(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	name := "outbox_test_empty_" + randomSuffix()
	if err := CreateDatabase(ctx, name, ""); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return connect(t, name)
}

// CreateDatabase creates database name on the test server, cloned from
// template when template is not empty.
func CreateDatabase(ctx context.Context, name, template string) error {
	return pgadmin.CreateDatabase(ctx, ServerURL(), name, template)
}

// DropDatabase drops database name on the test server.
func DropDatabase(ctx context.Context, name string) error {
	return pgadmin.DropDatabase(ctx, ServerURL(), name)
}

// ensureTemplate builds the template database for the current schema once
// per schema version. It is named after a hash of every migration, so a
// changed migration gets a new template instead of a stale one.
func ensureTemplate(ctx context.Context) (string, error) {
	h := sha256.New()
	for _, m := range migrations.All() {
		fmt.Fprintf(h, "%d\n%s\n%s\n", m.Version, m.Up, m.Down)
	}
	riverMigrator, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		return "", err
	}
	for _, m := range riverMigrator.AllVersions() {
		fmt.Fprintf(h, "river %d\n", m.Version)
	}
	name := "outbox_test_template_" + hex.EncodeToString(h.Sum(nil))[:16]

	conn, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", ServerURL(), err)
	}
	defer conn.Close(ctx)
	const lockKey = 0x6f7574746d706c // "outtmpl"
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(lockKey)); err != nil {
		return "", err
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, int64(lockKey)) //nolint:errcheck
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	// Build under a temporary name and rename when complete, so a run that
	// dies half-way never leaves a half-migrated template behind.
	building := name + "_build"
	if err := DropDatabase(ctx, building); err != nil {
		return "", err
	}
	if err := CreateDatabase(ctx, building, ""); err != nil {
		return "", err
	}
	buildURL, err := WithDatabase(ServerURL(), building)
	if err != nil {
		return "", err
	}
	pool, err := pgxpool.New(ctx, buildURL)
	if err != nil {
		return "", err
	}
	_, err = migrations.New(pool, nil).Up(ctx)
	pool.Close()
	if err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "COMMENT ON DATABASE "+pgx.Identifier{name}.Sanitize()+" IS "+quoteLiteral(templateStamp+time.Now().UTC().Format(time.RFC3339))); err != nil {
		return "", err
	}
	// Templates of other schemas may be another checkout's, in use by its
	// tests right now: drop only those built long ago, best effort (one
	// still being cloned stays).
	rows, err := conn.Query(ctx, `SELECT datname, coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database
		WHERE datname LIKE 'outbox\_test\_template\_%' AND datname <> $1 AND datname NOT LIKE '%\_build'`, name)
	if err == nil {
		type template struct{ Name, Comment string }
		others, _ := pgx.CollectRows(rows, pgx.RowToStructByPos[template])
		for _, db := range others {
			built, err := time.Parse(time.RFC3339, strings.TrimPrefix(db.Comment, templateStamp))
			if err == nil && time.Since(built) > staleTemplateAge {
				_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db.Name}.Sanitize())
			}
		}
	}
	return name, nil
}

// templateStamp begins a template database's comment, followed by when it
// was built.
const templateStamp = "outbox test template, built "

// staleTemplateAge is how old another schema's template must be before a
// run drops it.
const staleTemplateAge = 7 * 24 * time.Hour

func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

func randomSuffix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
