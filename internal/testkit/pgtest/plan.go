package pgtest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PlanModes are the plan_cache_mode values Plans explains a statement
// under: the plan made for the arguments given, and the generic plan
// Postgres keeps for a prepared statement after its fifth run, which is
// the one a long-lived pool mostly uses.
var PlanModes = []string{"force_custom_plan", "force_generic_plan"}

// Plans returns query's EXPLAIN under each of PlanModes, by mode, on one
// connection of pool, which it leaves as it found it.
func Plans(t testing.TB, pool *pgxpool.Pool, query string, args ...any) map[string]string {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	defer func() { _, _ = conn.Exec(ctx, `RESET plan_cache_mode`) }()
	plans := make(map[string]string, len(PlanModes))
	for _, mode := range PlanModes {
		if _, err := conn.Exec(ctx, `SELECT set_config('plan_cache_mode', $1, false)`, mode); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, "EXPLAIN "+query, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plans[mode] = strings.Join(lines, "\n")
	}
	return plans
}
