// Package metrics exposes the outbox's Prometheus metrics: counters and
// histograms fed by the dispatcher (through dispatcher.Observer) and by the
// ingest path (IntentsRecorded), gauges read from PostgreSQL at scrape time,
// and the Go runtime and process collectors.
//
// Everything is registered on a registry of its own, never on Prometheus's
// global one, so several Metrics (one per test, say) never collide. Serve it
// with promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{}).
package metrics

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers"
)

// Namespace prefixes every outbox metric name.
const Namespace = "outbox"

// Metrics holds the outbox's metrics and the registry they are served from.
// Create it with New. It implements dispatcher.Observer; set it as
// dispatcher.Config.Observer. Its methods are safe for concurrent use and do
// no I/O.
type Metrics struct {
	registry        *prometheus.Registry
	recorded        *prometheus.CounterVec
	finished        *prometheus.CounterVec
	attempts        *prometheus.CounterVec
	attemptDuration *prometheus.HistogramVec
	timeToSuccess   *prometheus.HistogramVec
}

var _ dispatcher.Observer = (*Metrics)(nil)

// New returns Metrics registered on a new registry, with the Go runtime and
// process collectors. With a non-nil pool it also registers the gauges read
// from the outbox's tables at each scrape (outbox_intents,
// outbox_oldest_pending_intent_age_seconds, outbox_database_up), each scrape
// querying for at most ScrapeTimeout; with a nil pool they are left out.
func New(pool *pgxpool.Pool) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		recorded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "intents_recorded_total",
			Help: "Intents recorded (committed) through the ingest path, by kind.",
		}, []string{"kind"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "intents_finished_total",
			Help: "Intents the dispatcher moved to succeeded, failed or in_doubt, by kind and state.",
		}, []string{"kind", "state"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "attempts_total",
			Help: "Attempts at intents whose outcome was recorded, by kind and outcome (succeeded, retry, failed, ambiguous).",
		}, []string{"kind", "outcome"}),
		attemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "attempt_duration_seconds",
			Help: "Duration of one call to a provider, by kind. Attempts found open after a crash are not timed.",
			// From a fast API call to dispatcher.DefaultCallTimeout and beyond.
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"kind"}),
		timeToSuccess: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "intent_time_to_success_seconds",
			Help: "Time from an intent's recording to its success, retries included, by kind.",
			// From an intent performed at once to one retried for a day.
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600},
		}, []string{"kind"}),
	}
	m.registry.MustRegister(m.recorded, m.finished, m.attempts, m.attemptDuration, m.timeToSuccess,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if pool != nil {
		m.registry.MustRegister(newDBCollector(pool))
	}
	return m
}

// Registry returns the registry every metric is registered on: the
// prometheus.Gatherer to serve, and where to register more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// IntentsRecorded counts n intents of kind as recorded. Call it after the
// transaction that recorded them committed, never for a duplicate delivery
// that recorded nothing.
func (m *Metrics) IntentsRecorded(kind string, n int) {
	if n > 0 {
		m.recorded.WithLabelValues(kind).Add(float64(n))
	}
}

// AttemptFinished implements dispatcher.Observer: it counts the attempt by
// outcome and times it, unless its duration is unknown (zero).
func (m *Metrics) AttemptFinished(kind string, outcome providers.Outcome, d time.Duration) {
	m.attempts.WithLabelValues(kind, string(outcome)).Inc()
	if d > 0 {
		m.attemptDuration.WithLabelValues(kind).Observe(d.Seconds())
	}
}

// IntentSettled implements dispatcher.Observer: it counts the intent by its
// new state and, for a success, observes the time since it was recorded.
func (m *Metrics) IntentSettled(kind string, state intenttype.State, sinceRecorded time.Duration) {
	m.finished.WithLabelValues(kind, string(state)).Inc()
	if state == intenttype.StateSucceeded {
		m.timeToSuccess.WithLabelValues(kind).Observe(sinceRecorded.Seconds())
	}
}
