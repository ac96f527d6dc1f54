package metrics_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/dispatcher/metrics"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

const (
	stripeKind = stripeprovider.KindPaymentIntent
	emailKind  = sendgridprovider.KindEmail

	paymentPayload  = `{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true}`
	declinedPayload = `{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa_chargeDeclined", "confirm": true}`
	emailPayload    = `{"from": {"email": "shop@example.com"}, "to": [{"email": "buyer@example.com"}], "subject": "Receipt", "text": "Thanks"}`
)

// scrape serves the registry through promhttp, as /metrics would, and parses
// the text it answers.
func scrape(t *testing.T, m *metrics.Metrics) scraped {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{}).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape answered %d: %s", rec.Code, rec.Body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	return families
}

// scraped is a parsed scrape: metric families by name.
type scraped map[string]*dto.MetricFamily

// value returns the value of the series of name with exactly labels (pairs
// of name, value), and whether it exists. For a histogram it returns the
// sample count.
func (s scraped) value(name string, labels ...string) (float64, bool) {
	fam, ok := s[name]
	if !ok {
		return 0, false
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range fam.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if want[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// series describes every series of the families named, for failure messages.
func (s scraped) series(prefix string) string {
	var out []string
	for name, fam := range s {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, m := range fam.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			out = append(out, fmt.Sprintf("%s{%s} %g", name, strings.Join(labels, ","), v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// expectation is one series' wanted value.
type expectation struct {
	name   string
	labels []string
	value  float64
}

// check returns the expectations the scrape does not meet.
func (s scraped) check(wants []expectation) []string {
	var bad []string
	for _, w := range wants {
		got, ok := s.value(w.name, w.labels...)
		if !ok || got != w.value {
			bad = append(bad, fmt.Sprintf("%s%v = %g (present %v), want %g", w.name, w.labels, got, ok, w.value))
		}
	}
	return bad
}

// waitFor scrapes until every expectation holds, or fails after a deadline.
// The dispatcher reports an outcome just after it commits.
func waitFor(t *testing.T, m *metrics.Metrics, wants []expectation) scraped {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := scrape(t, m)
		bad := s.check(wants)
		if len(bad) == 0 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s:\n  %s\nscrape:\n%s", strings.Join(bad, "\n  "), s.series("outbox_"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMetricsAfterRecordingAndDispatching(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	sd, err := stripedouble.NewServer(stripedouble.Config{Faults: fault.New(1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sd.Close() })
	sp, err := stripeprovider.New(stripeprovider.Config{APIKey: stripedouble.DefaultAPIKey, BaseURL: sd.URL()})
	if err != nil {
		t.Fatal(err)
	}
	// Emails are recorded but never performed: no dispatcher here has
	// SendGrid, so they stay pending.
	gp, err := sendgridprovider.New(sendgridprovider.Config{APIKey: "SG.unused", BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	recordingRegistry, err := providers.NewRegistry(sp, gp)
	if err != nil {
		t.Fatal(err)
	}
	stripeOnly, err := providers.NewRegistry(sp)
	if err != nil {
		t.Fatal(err)
	}
	client, err := intents.NewClient(pool, &intents.Config{Providers: recordingRegistry})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(pool)

	// record records one message with the given intents and counts them,
	// as the ingest path does after its commit.
	record := func(msg string, recorded ...intents.Intent) {
		t.Helper()
		res, err := client.Consume(ctx, intents.Message{Consumer: "metrics", ID: msg}, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			for _, in := range recorded {
				if err := rec.Record(in); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Duplicate {
			return
		}
		byKind := map[string]int{}
		for _, in := range res.Intents {
			byKind[in.Kind]++
		}
		for kind, n := range byKind {
			m.IntentsRecorded(kind, n)
		}
	}
	intent := func(kind, name, payload string) intents.Intent {
		return intents.Intent{Kind: kind, Name: name, Payload: json.RawMessage(payload)}
	}

	// Phase 1: recorded, nothing dispatched yet. A duplicate delivery
	// records nothing and counts nothing.
	record("order-1", intent(stripeKind, "payment", paymentPayload), intent(emailKind, "receipt", emailPayload))
	record("order-1", intent(stripeKind, "payment", paymentPayload), intent(emailKind, "receipt", emailPayload))
	record("order-2", intent(emailKind, "", emailPayload))
	s := waitFor(t, m, []expectation{
		{"outbox_intents_recorded_total", []string{"kind", stripeKind}, 1},
		{"outbox_intents_recorded_total", []string{"kind", emailKind}, 2},
		{"outbox_intents", []string{"state", "pending"}, 3},
		{"outbox_intents", []string{"state", "dispatching"}, 0},
		{"outbox_intents", []string{"state", "in_doubt"}, 0},
		{"outbox_database_up", nil, 1},
	})
	if age, _ := s.value("outbox_oldest_pending_intent_age_seconds"); age <= 0 || age > 60 {
		t.Errorf("outbox_oldest_pending_intent_age_seconds = %g, want the age of order-1's intents (> 0, < 60)", age)
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := s[name]; !ok {
			t.Errorf("scrape has no %s: the Go and process collectors are missing", name)
		}
	}

	// Phase 2: order-1's payment meets a saved 500 with no charge, and the
	// look-up finds an object with its key but another amount (held
	// in_doubt: never adopted); then one payment succeeds and a declined
	// one fails.
	ns, key := fixture.ProviderKey(t, pool, "metrics:order-1:payment", 255)
	fixture.ForeignPaymentIntent(t, sd, ns, key, 1, 999, "cus_1")
	sd.Faults().Push(fault.Fault{Kind: fault.ErrorBefore, Status: 500})
	d, err := dispatcher.New(pool, &dispatcher.Config{
		Providers: stripeOnly, Observer: m, CallTimeout: 2 * time.Second,
		RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 50 * time.Millisecond,
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Stop(stopCtx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	waitFor(t, m, []expectation{{"outbox_intents_finished_total", []string{"kind", stripeKind, "state", "in_doubt"}, 1}})
	record("order-3", intent(stripeKind, "", paymentPayload))
	record("order-4", intent(stripeKind, "", declinedPayload))

	s = waitFor(t, m, []expectation{
		{"outbox_intents_recorded_total", []string{"kind", stripeKind}, 3},
		{"outbox_attempts_total", []string{"kind", stripeKind, "outcome", "ambiguous"}, 1},
		{"outbox_attempts_total", []string{"kind", stripeKind, "outcome", "succeeded"}, 1},
		{"outbox_attempts_total", []string{"kind", stripeKind, "outcome", "failed"}, 1},
		{"outbox_intents_finished_total", []string{"kind", stripeKind, "state", "in_doubt"}, 1},
		{"outbox_intents_finished_total", []string{"kind", stripeKind, "state", "succeeded"}, 1},
		{"outbox_intents_finished_total", []string{"kind", stripeKind, "state", "failed"}, 1},
		{"outbox_attempt_duration_seconds", []string{"kind", stripeKind}, 3},
		{"outbox_intent_time_to_success_seconds", []string{"kind", stripeKind}, 1},
		{"outbox_intents", []string{"state", "pending"}, 2}, // the emails
		{"outbox_intents", []string{"state", "in_doubt"}, 1},
		{"outbox_intents", []string{"state", "dispatching"}, 0},
	})
	if sum := s["outbox_intent_time_to_success_seconds"].GetMetric()[0].GetHistogram().GetSampleSum(); sum <= 0 || sum > 60 {
		t.Errorf("time to success = %gs, want the few moments order-3 took", sum)
	}
	if _, ok := s.value("outbox_attempts_total", "kind", emailKind, "outcome", "succeeded"); ok {
		t.Errorf("emails were never attempted, yet their attempts are counted:\n%s", s.series("outbox_attempts"))
	}
}

func TestMetricsWithoutTheDatabase(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDB(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	pool.Close() // every query now fails at once

	m := metrics.New(pool)
	m.AttemptFinished(stripeKind, providers.OutcomeRetry, 0) // duration unknown: counted, not timed
	s := scrape(t, m)
	if bad := s.check([]expectation{
		{"outbox_database_up", nil, 0},
		{"outbox_attempts_total", []string{"kind", stripeKind, "outcome", "retry"}, 1},
	}); len(bad) > 0 {
		t.Errorf("%s", strings.Join(bad, "\n"))
	}
	if _, ok := s.value("outbox_attempt_duration_seconds", "kind", stripeKind); ok {
		t.Errorf("an attempt of unknown duration was timed")
	}
	for _, name := range []string{"outbox_intents", "outbox_oldest_pending_intent_age_seconds"} {
		if _, ok := s[name]; ok {
			t.Errorf("%s is served though the database could not be read", name)
		}
	}
	if _, ok := s["go_goroutines"]; !ok {
		t.Errorf("a failed database read lost the other metrics")
	}

	// Without a pool the database gauges are not registered at all.
	s = scrape(t, metrics.New(nil))
	if _, ok := s["outbox_database_up"]; ok {
		t.Errorf("metrics.New(nil) serves outbox_database_up")
	}
	m.IntentSettled(stripeKind, intenttype.StateFailed, time.Second)
	if bad := scrape(t, m).check([]expectation{{"outbox_intents_finished_total", []string{"kind", stripeKind, "state", "failed"}, 1}}); len(bad) > 0 {
		t.Errorf("%s", strings.Join(bad, "\n"))
	}
}
