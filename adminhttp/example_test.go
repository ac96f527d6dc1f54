package adminhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/outboxkit/outbox/adminhttp"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

// The dashboard and the admin API in a service's own server, under
// /outbox, beside the service's own routes: the same handler `outboxd run`
// serves on its admin address.
func ExampleNewHandler() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()                      // stops River's UI, which Start started
	pool, cleanup := pgtest.ExampleDB() // a migrated database, as `outboxd migrate` leaves it
	defer cleanup()

	email, _ := sendgridprovider.New(sendgridprovider.Config{}) // validation and redaction only
	registry, _ := providers.NewRegistry(email)
	client, _ := intents.NewClient(pool, &intents.Config{Providers: registry})
	store, _ := audit.New(pool, registry)

	const token = "change-me-to-a-long-random-secret"
	// readme:mount begin
	admin, err := adminhttp.NewHandler(adminhttp.Config{
		Prefix:  "/outbox", // every route, link and the session cookie under it
		Token:   token,     // at least 16 bytes; required off loopback
		Audit:   store,     // audit.New(pool, registry)
		Intents: client,    // intents.NewClient(pool, ...), for POST /outbox/api/v1/messages
		Pool:    pool,
	})
	if err != nil {
		fmt.Println("error:", err) // a *adminhttp.ConfigError naming the field
		return
	}
	if err := admin.Start(ctx); err != nil { // River's UI runs until ctx is done
		fmt.Println("error:", err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "the service's own page") })
	mux.Handle("/outbox/", admin) // the whole path: not through http.StripPrefix
	// readme:mount end
	srv := httptest.NewServer(mux)
	defer srv.Close()

	noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, bearer bool) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if bearer {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := noRedirects.Do(req)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		said := strings.TrimSpace(string(body))
		if loc := resp.Header.Get("Location"); loc != "" {
			said = "to " + loc
		}
		fmt.Printf("GET %s: %d %s\n", path, resp.StatusCode, strings.Join(strings.Fields(said), " "))
	}
	get("/orders", false)
	get("/outbox/healthz", false)
	get("/outbox/", false) // a browser is sent to sign in with the token
	get("/outbox/api/v1/stats", false)
	get("/outbox/api/v1/intents?state=in_doubt", true)
	// Output:
	// GET /orders: 200 the service's own page
	// GET /outbox/healthz: 200 ok
	// GET /outbox/: 303 to /outbox/login?next=%2Foutbox%2F
	// GET /outbox/api/v1/stats: 401 { "error": "missing or invalid bearer token" }
	// GET /outbox/api/v1/intents?state=in_doubt: 200 { "intents": [] }
}
