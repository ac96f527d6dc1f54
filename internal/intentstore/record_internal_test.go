package intentstore

import (
	"context"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// collectIDs does not depend on the order the rows come back in: keys out
// of order are found by key, and a key missing or not asked for is an
// error rather than an id given to the wrong intent.
func TestCollectIDsFindsKeysInAnyOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	batch := func() *InsertBatch {
		var ib InsertBatch
		for _, k := range []string{"a", "b", "c"} {
			ib.Add(NewIntent{Key: k})
		}
		return &ib
	}
	collect := func(ib *InsertBatch, values string) error {
		rows, err := pool.Query(ctx, `SELECT id::bigint, key FROM (VALUES `+values+`) AS t(id, key)`)
		if err != nil {
			t.Fatal(err)
		}
		return ib.collectIDs(rows)
	}
	for _, values := range []string{`(1, 'a'), (2, 'b'), (3, 'c')`, `(3, 'c'), (1, 'a'), (2, 'b')`, `(1, 'a'), (3, 'c'), (2, 'b')`} {
		ib := batch()
		if err := collect(ib, values); err != nil {
			t.Fatalf("%s: %v", values, err)
		}
		if ib.IDs[0] != 1 || ib.IDs[1] != 2 || ib.IDs[2] != 3 {
			t.Errorf("%s: IDs = %v, want [1 2 3]", values, ib.IDs)
		}
	}
	if err := collect(batch(), `(1, 'a'), (2, 'b')`); err == nil || !strings.Contains(err.Error(), "stored 2 intents of 3") {
		t.Errorf("a key missing: %v", err)
	}
	if err := collect(batch(), `(1, 'a'), (2, 'x'), (3, 'c')`); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("a key not asked for: %v", err)
	}
}
