package fault

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestInjectorQueuedFaultsComeFirstInOrder(t *testing.T) {
	t.Parallel()
	inj := New(1)
	inj.Push(Fault{Kind: LoseResponse}, Fault{Kind: RateLimit})
	if got := inj.Next().Kind; got != LoseResponse {
		t.Fatalf("first fault = %q, want %q", got, LoseResponse)
	}
	if got := inj.Next().Kind; got != RateLimit {
		t.Fatalf("second fault = %q, want %q", got, RateLimit)
	}
	if got := inj.Next().Kind; got != None {
		t.Fatalf("third fault = %q, want none", got)
	}
	if got := inj.Injected(); got[LoseResponse] != 1 || got[RateLimit] != 1 {
		t.Fatalf("Injected() = %v", got)
	}
}

func TestInjectorRatesAreSeededAndRoughlyHonoured(t *testing.T) {
	t.Parallel()
	draw := func() map[Kind]int {
		inj := New(42)
		if err := inj.SetRates(Rates{LoseResponse: 0.2, ErrorAfter: 0.1}); err != nil {
			t.Fatal(err)
		}
		for range 10000 {
			inj.Next()
		}
		return inj.Injected()
	}
	a, b := draw(), draw()
	if a[LoseResponse] != b[LoseResponse] || a[ErrorAfter] != b[ErrorAfter] {
		t.Fatalf("same seed gave different draws: %v vs %v", a, b)
	}
	if a[LoseResponse] < 1800 || a[LoseResponse] > 2200 {
		t.Fatalf("lose_response drawn %d times of 10000 at rate 0.2", a[LoseResponse])
	}
	if a[ErrorAfter] < 850 || a[ErrorAfter] > 1150 {
		t.Fatalf("error_after drawn %d times of 10000 at rate 0.1", a[ErrorAfter])
	}
}

func TestSetRatesRejectsImpossibleRates(t *testing.T) {
	t.Parallel()
	inj := New(1)
	if err := inj.SetRates(Rates{LoseResponse: 0.7, ErrorAfter: 0.7}); err == nil {
		t.Fatal("rates adding up to 1.4 were accepted")
	}
	if err := inj.SetRates(Rates{Delay: -0.1}); err == nil {
		t.Fatal("a negative rate was accepted")
	}
}

func TestDropConnectionGivesTheClientNoResponse(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		DropConnection(w)
	}))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", nil)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got a response (%d), want a dropped connection", resp.StatusCode)
	}
}
