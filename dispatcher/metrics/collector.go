package metrics

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// ScrapeTimeout bounds the query a scrape makes for the database gauges. A
// scrape that takes longer reports outbox_database_up 0 and leaves the
// gauges out, rather than holding the scrape (and a connection).
const ScrapeTimeout = 2 * time.Second

// unfinishedSQL counts the unfinished intents by state, and measures the
// age of the oldest pending one on the database's clock (0 when none), in
// one pass over outbox_intents_unfinished_idx.
const unfinishedSQL = `
SELECT
    count(*) FILTER (WHERE state = 'waiting'),
    count(*) FILTER (WHERE state = 'pending'),
    count(*) FILTER (WHERE state = 'dispatching'),
    count(*) FILTER (WHERE state = 'in_doubt'),
    coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'pending')), 0)::float8
FROM outbox_intents
WHERE finished_at IS NULL AND state IN ('waiting', 'pending', 'dispatching', 'in_doubt')`

// dbCollector reads gauges from PostgreSQL at scrape time.
type dbCollector struct {
	pool          *pgxpool.Pool
	intents       *prometheus.Desc
	oldestPending *prometheus.Desc
	up            *prometheus.Desc
}

func newDBCollector(pool *pgxpool.Pool) *dbCollector {
	return &dbCollector{
		pool: pool,
		intents: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "intents"),
			"Intents now in each unfinished state (waiting, pending, dispatching, in_doubt), read from the database at scrape time.",
			[]string{"state"}, nil),
		oldestPending: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "oldest_pending_intent_age_seconds"),
			"Age of the oldest pending intent (recorded, not yet performed), or 0 when none is pending.",
			nil, nil),
		up: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "database_up"),
			"1 when the scrape could read the outbox's tables within the scrape timeout, else 0 (and the database gauges are missing).",
			nil, nil),
	}
}

func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.intents
	ch <- c.oldestPending
	ch <- c.up
}

func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	// The states an operator watches, all served by the partial index on
	// unfinished intents. Terminal states are left out on purpose: counting
	// them would scan every intent kept for the audit;
	// outbox_intents_finished_total counts them as they happen.
	states := [...]intenttype.State{intenttype.StateWaiting, intenttype.StatePending, intenttype.StateDispatching, intenttype.StateInDoubt}
	var counts [len(states)]int64
	var oldest float64
	err := c.pool.QueryRow(ctx, unfinishedSQL).Scan(&counts[0], &counts[1], &counts[2], &counts[3], &oldest)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for i, state := range states {
		ch <- prometheus.MustNewConstMetric(c.intents, prometheus.GaugeValue, float64(counts[i]), string(state))
	}
	ch <- prometheus.MustNewConstMetric(c.oldestPending, prometheus.GaugeValue, oldest)
}
