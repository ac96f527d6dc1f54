package intentstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A pooler in transaction mode (PgBouncer's pool_mode = transaction) gives
// each transaction of a client connection whichever server session is
// free: what a session keeps — a LISTEN, a prepared statement, a session
// advisory lock — is then another client's, or gone. Such a pooler cannot
// be asked what it is (it passes SHOW to the server), but it can be seen:
// while a second connection holds, in an open transaction, the session the
// first one last used (a pooler hands out the most recently freed session
// first, as PgBouncer does by default), the first one's next statement
// runs in another session. Connected to Postgres itself, a connection's
// session never changes.

// SessionsPooled reports whether pool's connections reach Postgres through
// a pooler that does not keep a client's session from one transaction to
// the next. It takes two connections of pool for a moment and writes
// nothing.
//
// A pool of one connection cannot be checked (it would wait for itself):
// it reports false.
func SessionsPooled(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	if pool.Config().MaxConns < 2 {
		return false, nil
	}
	first, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("intentstore: check for a transaction pooler: %w", err)
	}
	defer first.Release()
	second, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("intentstore: check for a transaction pooler: %w", err)
	}
	defer second.Release()
	// Simple protocol: a statement prepared in one session and run in
	// another would fail the check itself.
	var before, held, after int32
	if err := first.QueryRow(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&before); err != nil {
		return false, fmt.Errorf("intentstore: check for a transaction pooler: %w", err)
	}
	err = pgx.BeginTxFunc(ctx, second, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&held); err != nil {
			return err
		}
		return first.QueryRow(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&after)
	})
	if err != nil {
		return false, fmt.Errorf("intentstore: check for a transaction pooler: %w", err)
	}
	return before != after, nil
}

// Prepares reports whether connections configured as cfg prepare named
// statements that they reuse later (pgx's default, cache_statement, and
// cache_describe): behind a transaction pooler the session that prepared
// one is soon another client's, and the statement "does not exist".
func Prepares(cfg *pgx.ConnConfig) bool {
	switch cfg.DefaultQueryExecMode {
	case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe:
		return cfg.StatementCacheCapacity > 0 || cfg.DescriptionCacheCapacity > 0
	}
	return false
}

// AsyncStandbys counts the standbys streaming from the server of pool when
// none is named synchronous (synchronous_standby_names is empty): a
// failover to one of them can lose the last commits, a write-ahead claim
// among them, since a claim's commit waits only for synchronous standbys
// (durableClaimSQL). A role without pg_read_all_stats sees the standbys'
// rows too, only not their details.
func AsyncStandbys(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `
		SELECT count(*) FROM pg_stat_replication
		WHERE current_setting('synchronous_standby_names') = ''`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("intentstore: count the asynchronous standbys: %w", err)
	}
	return n, nil
}
