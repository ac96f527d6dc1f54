package stripedouble_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// list pages through GET /v1/payment_intents with stripe-go's iterator.
func list(t *testing.T, d *stripedouble.Server, lp *stripe.PaymentIntentListParams) []*stripe.PaymentIntent {
	t.Helper()
	iter := sdk(d, stripedouble.DefaultAPIKey).PaymentIntents.List(lp)
	var out []*stripe.PaymentIntent
	for iter.Next() {
		out = append(out, iter.PaymentIntent())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("list: %v", err)
	}
	return out
}

func ids(pis []*stripe.PaymentIntent) []string {
	out := make([]string, len(pis))
	for i, pi := range pis {
		out[i] = pi.ID
	}
	return out
}

func TestList(t *testing.T) {
	clk := testkit.NewClock(time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC))
	d := start(t, stripedouble.Config{Now: clk.Now})
	api := sdk(d, stripedouble.DefaultAPIKey)
	ctx := context.Background()
	var created []string // oldest first, one second apart
	for i := 0; i < 5; i++ {
		p := params(ctx, "l-"+strconv.Itoa(i), int64(i), 100)
		if i == 4 {
			p.Customer = stripe.String("cus_other")
		}
		pi, err := api.PaymentIntents.New(p)
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, pi.ID)
		clk.Advance(time.Second)
	}
	first := clk.Now().Add(-5 * time.Second).Unix() // when created[0] was made

	t.Run("NewestFirstAcrossPages", func(t *testing.T) {
		lp := &stripe.PaymentIntentListParams{}
		lp.Limit = stripe.Int64(2) // makes the iterator follow has_more with starting_after
		got := ids(list(t, d, lp))
		want := []string{created[4], created[3], created[2], created[1], created[0]}
		if len(got) != 5 || got[0] != want[0] || got[4] != want[4] {
			t.Fatalf("listed %v, want %v", got, want)
		}
	})
	t.Run("Customer", func(t *testing.T) {
		got := ids(list(t, d, &stripe.PaymentIntentListParams{Customer: stripe.String("cus_other")}))
		if len(got) != 1 || got[0] != created[4] {
			t.Fatalf("listed %v", got)
		}
	})
	t.Run("CreatedRange", func(t *testing.T) {
		got := ids(list(t, d, &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: first + 3}}))
		if len(got) != 2 || got[0] != created[4] || got[1] != created[3] {
			t.Fatalf("created[gte] listed %v", got)
		}
		got = ids(list(t, d, &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThan: first + 1, LesserThan: first + 3}}))
		if len(got) != 1 || got[0] != created[2] {
			t.Fatalf("created[gt]+[lt] listed %v", got)
		}
		got = ids(list(t, d, &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{LesserThanOrEqual: first + 1}}))
		if len(got) != 2 || got[0] != created[1] {
			t.Fatalf("created[lte] listed %v", got)
		}
		got = ids(list(t, d, &stripe.PaymentIntentListParams{Created: stripe.Int64(first + 2)}))
		if len(got) != 1 || got[0] != created[2] {
			t.Fatalf("created= listed %v", got)
		}
	})
	t.Run("ListObject", func(t *testing.T) {
		resp, body := get(t, d, "/v1/payment_intents?limit=2")
		var l struct {
			Object  string           `json:"object"`
			URL     string           `json:"url"`
			HasMore bool             `json:"has_more"`
			Data    []map[string]any `json:"data"`
		}
		if err := json.Unmarshal(body, &l); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if l.Object != "list" || l.URL != "/v1/payment_intents" || !l.HasMore || len(l.Data) != 2 || l.Data[0]["id"] != created[4] {
			t.Fatalf("list object %s", body)
		}
		_, body = get(t, d, "/v1/payment_intents?starting_after="+created[1])
		if err := json.Unmarshal(body, &l); err != nil || l.HasMore || len(l.Data) != 1 || l.Data[0]["id"] != created[0] {
			t.Fatalf("starting_after: %s", body)
		}
		_, body = get(t, d, "/v1/payment_intents?limit=1&ending_before="+created[1])
		if err := json.Unmarshal(body, &l); err != nil || !l.HasMore || len(l.Data) != 1 || l.Data[0]["id"] != created[2] {
			t.Fatalf("ending_before: %s", body)
		}
		_, body = get(t, d, "/v1/payment_intents")
		if err := json.Unmarshal(body, &l); err != nil || l.HasMore || len(l.Data) != 5 {
			t.Fatalf("default limit: %s", body)
		}
	})
	t.Run("BadRequests", func(t *testing.T) {
		for q, param := range map[string]string{
			"limit=0":                          "limit",
			"limit=101":                        "limit",
			"limit=x":                          "limit",
			"created[gte]=soon":                "created[gte]",
			"created[since]=1":                 "created[since]",
			"metadata[outbox_key]=k":           "metadata[outbox_key]",
			"starting_after=pi_nosuchone":      "starting_after",
			"starting_after=a&ending_before=b": "starting_after",
		} {
			resp, body := get(t, d, "/v1/payment_intents?"+q)
			var e struct {
				Error struct {
					Type  string `json:"type"`
					Param string `json:"param"`
				} `json:"error"`
			}
			_ = json.Unmarshal(body, &e)
			if resp.StatusCode != 400 || e.Error.Type != "invalid_request_error" || e.Error.Param != param {
				t.Errorf("%s: %d %s", q, resp.StatusCode, body)
			}
		}
	})
	if st := d.Stats(); st.ListRequests == 0 || st.SearchRequests != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSearchLagsListDoesNot shows the eventual consistency of search that
// Reconcile must not trust: a PaymentIntent created moments ago is listed at
// once but found by search only once the lag has passed.
func TestSearchLagsListDoesNot(t *testing.T) {
	clk := testkit.NewClock(time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC))
	d := start(t, stripedouble.Config{Now: clk.Now, SearchLag: time.Minute})
	api := sdk(d, stripedouble.DefaultAPIKey)
	ctx := context.Background()
	pi, err := api.PaymentIntents.New(params(ctx, "lag", 7, 100))
	if err != nil {
		t.Fatal(err)
	}
	search := func() int {
		sp := &stripe.PaymentIntentSearchParams{}
		sp.Query = "metadata['intent_id']:'7'"
		iter := api.PaymentIntents.Search(sp)
		n := 0
		for iter.Next() {
			n++
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := ids(list(t, d, &stripe.PaymentIntentListParams{Customer: stripe.String("cus_1")})); len(got) != 1 || got[0] != pi.ID {
		t.Fatalf("list right after creation: %v", got)
	}
	if n := search(); n != 0 {
		t.Fatalf("search found %d before the lag passed", n)
	}
	clk.Advance(59 * time.Second)
	if n := search(); n != 0 {
		t.Fatalf("search found %d before the lag passed", n)
	}
	clk.Advance(time.Second)
	if n := search(); n != 1 {
		t.Fatalf("search found %d after the lag", n)
	}
	if recs := d.PaymentIntents(); len(recs) != 1 || !recs[0].SearchableAt.Equal(recs[0].Created.Add(time.Minute)) {
		t.Fatalf("records %+v", recs)
	}
	d.SetSearchLag(0)
	if _, err := api.PaymentIntents.New(params(ctx, "nolag", 7, 100)); err != nil {
		t.Fatal(err)
	}
	if n := search(); n != 2 {
		t.Fatalf("search found %d with no lag", n)
	}
}

func get(t *testing.T, d *stripedouble.Server, path string) (*http.Response, []byte) {
	t.Helper()
	u, err := url.Parse(d.URL() + path)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, u.String(), nil)
	req.Header.Set("Authorization", "Bearer "+stripedouble.DefaultAPIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, buf
}
