package metrics_test

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/dispatcher/metrics"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

// A service that runs the dispatcher itself, without outboxd, exposes the
// same Prometheus metrics: attempts and settlements through the Observer,
// backlog and in_doubt gauges read from the database at scrape time.
func ExampleNew() {
	pool, cleanup := pgtest.ExampleDB() // a migrated database
	defer cleanup()

	m := metrics.New(pool)
	email, _ := sendgridprovider.New(sendgridprovider.Config{APIKey: "SG.example", BaseURL: "http://127.0.0.1:1"})
	registry, _ := providers.NewRegistry(email)
	d, err := dispatcher.New(pool, &dispatcher.Config{Providers: registry, Observer: m})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	_ = d // d.Start(ctx) ... d.Stop(ctx)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{}))
	// Before any attempt, the gauges read from the database are there.
	families, _ := m.Registry().Gather()
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "outbox_intents") && f.GetType().String() == "GAUGE" {
			fmt.Println(f.GetName())
		}
	}
	// Output:
	// outbox_intents
}
