package intentstore

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// The counting statements test "finished" as a state in finishedSQL; the
// list must be exactly the terminal states, or an intent would be counted
// twice or never.
func TestFinishedSQLListsTheTerminalStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	for _, st := range intenttype.States {
		var in bool
		if err := pool.QueryRow(ctx, `SELECT $1::text IN `+finishedSQL, string(st)).Scan(&in); err != nil {
			t.Fatal(err)
		}
		if in != st.Terminal() {
			t.Errorf("state %s: in finishedSQL %v, terminal %v", st, in, st.Terminal())
		}
	}
}

// The settlement ends its dispatch job through the job's primary key,
// whatever statistics the planner holds: with none of the analysed jobs
// running, a test of state = 'running' made the generic plan walk River's
// fetch index instead (see endJobSQL).
func TestSettledFindsTheJobByItsPrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	if _, err := pool.Exec(ctx, `INSERT INTO river_job (args, kind, queue, max_attempts, state, finalized_at)
		SELECT jsonb_build_object('intent_id', g), 'outbox_dispatch', 'outbox', 10, 'completed', now()
		FROM generate_series(1, 5000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE river_job`); err != nil {
		t.Fatal(err)
	}
	plan := pgtest.Plans(t, pool, endJobSQL, pgx.NamedArgs{"id": int64(1), "job_id": int64(1)})["force_generic_plan"]
	if !strings.Contains(plan, "Index Scan using river_job_pkey on river_job") {
		t.Fatalf("endJobSQL's generic plan does not find the job by its primary key:\n%s", plan)
	}
}
