package pgcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/testkit/pgcluster"
)

func count(t *testing.T, s *pgcluster.Server) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A standby behind a held gate stops receiving; cut and promoted, it has
// what it received before the hold and nothing after: the lag a failover
// to an asynchronous standby loses.
func TestAStandbyBehindACutGateLosesWhatItNeverReceived(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgcluster.ForTest(t, nil)
	gate := c.Gate()
	standby := c.Standby("standby1", gate.Addr())
	if err := c.Primary.Exec(ctx, "postgres", `CREATE TABLE t (n int); INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, standby.URL("postgres"))
		if err == nil {
			var n int
			err = conn.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n)
			conn.Close(ctx)
			if err == nil && n == 1 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby did not replay the first row within 20s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	gate.Hold()
	if err := c.Primary.Exec(ctx, "postgres", `INSERT INTO t VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	if err := c.Primary.StopImmediately(ctx); err != nil {
		t.Fatal(err)
	}
	gate.Cut()
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, standby); n != 1 {
		t.Fatalf("the promoted standby has %d rows, want 1 (the row written while held is lost)", n)
	}
	if err := standby.Exec(ctx, "postgres", `INSERT INTO t VALUES (3)`); err != nil {
		t.Fatalf("the promoted standby takes no writes: %v", err)
	}
}
